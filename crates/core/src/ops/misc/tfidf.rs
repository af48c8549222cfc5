//! TfIdfVectorizer: counts the n-grams of a pool in each row of integers, as term frequencies,
//! inverse document frequency weights, or both.
//!
//! An n-gram starts at any position and takes every `skip + 1`-th item, for each skip up to
//! `max_skip_count`; a unigram is counted once per position, whatever the skip. The pool holds
//! the n-grams of each length one after another (`ngram_counts[k]` is where the (k+1)-grams
//! start), and `ngram_indexes` maps the i-th pooled n-gram to its output column.
//!
//! A pool of strings (`pool_strings`) is held as integer ids into `vocabulary`: string inputs
//! are turned into the same ids (a string not in the vocabulary matches nothing), then counted
//! as integers are.

use crate::op::{input, output, required, Prototype};
use crate::{op_common, op_ensure, DType, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};
use std::collections::HashMap;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TfIdfMode {
    #[default]
    Tf,
    Idf,
    TfIdf,
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TfIdfVectorizer {
    pub min_gram_length: usize,
    pub max_gram_length: usize,
    pub max_skip_count: usize,
    pub mode: TfIdfMode,
    pub ngram_counts: Vec<usize>,
    pub ngram_indexes: Vec<usize>,
    pub pool: Vec<i64>,
    /// Per pooled n-gram (empty: all 1).
    pub weights: Vec<f32>,
    /// For a pool of strings: the distinct strings, whose positions are the ids `pool` holds.
    /// Empty for a pool of integers.
    pub vocabulary: Vec<String>,
}

impl TfIdfVectorizer {
    /// `pool` and `vocabulary` for a pool of strings: each distinct string gets an id.
    pub fn string_pool(strings: &[String]) -> (Vec<i64>, Vec<String>) {
        let mut ids: HashMap<&str, i64> = HashMap::new();
        let mut vocabulary = Vec::new();
        let pool = strings
            .iter()
            .map(|s| {
                *ids.entry(s.as_str()).or_insert_with(|| {
                    vocabulary.push(s.clone());
                    vocabulary.len() as i64 - 1
                })
            })
            .collect();
        (pool, vocabulary)
    }

    /// The input as ids: integers as they are, strings by their vocabulary position (-1, which
    /// no pooled n-gram holds, for a string outside it).
    fn ids(&self, x: &Tensor) -> OpResult<Vec<i64>> {
        if x.dtype() != DType::String {
            op_ensure!(
                self.vocabulary.is_empty(),
                "input 0 (X) is {}, but the pool holds strings",
                x.dtype()
            );
            return Ok(x.to_i64_vec());
        }
        op_ensure!(
            !self.vocabulary.is_empty(),
            "input 0 (X) holds strings, but the pool holds integers"
        );
        let ids: HashMap<&str, i64> = self
            .vocabulary
            .iter()
            .enumerate()
            .map(|(i, s)| (s.as_str(), i as i64))
            .collect();
        Ok(x.strings()?
            .iter()
            .map(|s| ids.get(s.as_str()).copied().unwrap_or(-1))
            .collect())
    }
}

impl TfIdfVectorizer {
    /// The output's columns.
    fn width(&self) -> usize {
        self.ngram_indexes.iter().max().map_or(0, |&m| m + 1)
    }

    fn check(&self) -> OpResult<()> {
        op_ensure!(
            self.min_gram_length >= 1 && self.min_gram_length <= self.max_gram_length,
            "min_gram_length {} and max_gram_length {} must satisfy 1 <= min <= max",
            self.min_gram_length,
            self.max_gram_length
        );
        op_ensure!(
            self.ngram_counts.windows(2).all(|w| w[0] <= w[1])
                && self
                    .ngram_counts
                    .last()
                    .is_none_or(|&c| c <= self.pool.len()),
            "ngram_counts {:?} must rise within the pool's {} items",
            self.ngram_counts,
            self.pool.len()
        );
        // The output's width comes from these numbers: bounded by the n-grams there are, a
        // file cannot size an allocation at will.
        op_ensure!(
            self.ngram_indexes
                .iter()
                .all(|&i| i < self.ngram_indexes.len()),
            "ngram_indexes {:?} must each be below the number of n-grams ({})",
            self.ngram_indexes,
            self.ngram_indexes.len()
        );
        op_ensure!(
            self.weights.is_empty() || self.weights.len() == self.ngram_indexes.len(),
            "weights has {} entries, ngram_indexes {}",
            self.weights.len(),
            self.ngram_indexes.len()
        );
        Ok(())
    }

    /// Every pooled n-gram with the number it has in pool order.
    fn grams(&self) -> OpResult<HashMap<&[i64], usize>> {
        let mut grams = HashMap::new();
        let mut number = 0;
        for (k, &start) in self.ngram_counts.iter().enumerate() {
            let n = k + 1;
            let end = self
                .ngram_counts
                .get(k + 1)
                .copied()
                .unwrap_or(self.pool.len());
            op_ensure!(
                (end - start).is_multiple_of(n),
                "the pool's {n}-grams take {} items, not a multiple of {n}",
                end - start
            );
            for gram in self.pool[start..end].chunks(n) {
                grams.insert(gram, number);
                number += 1;
            }
        }
        op_ensure!(
            number == self.ngram_indexes.len(),
            "the pool holds {number} n-grams, ngram_indexes {}",
            self.ngram_indexes.len()
        );
        Ok(grams)
    }
}

impl Op for TfIdfVectorizer {
    op_common!(
        "TfIdfVectorizer",
        Prototype {
            inputs: &[input("X", DTypeSet::INDEX.union(DTypeSet::STRING))],
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        self.check()?;
        let x = ctx.shape(0)?;
        let shape = match x.len() {
            1 => vec![self.width()],
            2 => vec![x[0], self.width()],
            r => crate::op_bail!("input 0 (X): expected rank 1 or 2, got rank {r}"),
        };
        Ok(vec![TensorInfo::new(DType::F32, shape)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        self.check()?;
        let x = required(inputs, 0)?;
        let grams = self.grams()?;
        let (rows, len) = match x.shape() {
            [c] => (1, *c),
            [n, c] => (*n, *c),
            s => crate::op_bail!("input 0 (X): expected rank 1 or 2, got {s:?}"),
        };
        let values = self.ids(x)?;
        let width = self.width();
        let mut out = vec![0f32; rows * width];
        // Skips and lengths past the row's length find nothing: bounding them keeps hostile
        // attribute values from looping (or overflowing) for nothing.
        let max_skip = self.max_skip_count.min(len);
        let max_gram = self.max_gram_length.min(len);
        let mut gram = Vec::with_capacity(max_gram);
        for r in 0..rows {
            let row = &values[r * len..(r + 1) * len];
            let counts = &mut out[r * width..(r + 1) * width];
            for start in 0..len {
                for skip in 0..=max_skip {
                    for n in self.min_gram_length..=max_gram {
                        if n == 1 && skip > 0 {
                            continue;
                        }
                        let last = start + (n - 1) * (skip + 1);
                        if last >= len {
                            break;
                        }
                        gram.clear();
                        gram.extend((0..n).map(|i| row[start + i * (skip + 1)]));
                        if let Some(&number) = grams.get(gram.as_slice()) {
                            counts[self.ngram_indexes[number]] += 1.0;
                        }
                    }
                }
            }
            // Weights are per pooled n-gram; apply them at the n-gram's column.
            if self.mode != TfIdfMode::Tf {
                for (number, &column) in self.ngram_indexes.iter().enumerate() {
                    let w = self.weights.get(number).copied().unwrap_or(1.0);
                    let c = &mut counts[column];
                    *c = match self.mode {
                        TfIdfMode::Idf if *c > 0.0 => w,
                        TfIdfMode::Idf => 0.0,
                        _ => *c * w,
                    };
                }
            }
        }
        let shape: &[usize] = if x.rank() == 1 {
            &[width]
        } else {
            &[rows, width]
        };
        Ok(vec![Tensor::from_vec(shape, out)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pool: unigrams [2], [3]; bigrams [2 3], [4 5].
    fn vectorizer(min: usize, max: usize, skip: usize, mode: TfIdfMode) -> TfIdfVectorizer {
        TfIdfVectorizer {
            min_gram_length: min,
            max_gram_length: max,
            max_skip_count: skip,
            mode,
            ngram_counts: vec![0, 2],
            ngram_indexes: vec![0, 1, 2, 3],
            pool: vec![2, 3, 2, 3, 4, 5],
            weights: vec![],
            vocabulary: vec![],
        }
    }

    fn run(op: &TfIdfVectorizer, x: &[i32]) -> Vec<f64> {
        let x = Tensor::from_vec(&[x.len()], x.to_vec()).unwrap();
        op.eval(&[Some(&x)]).unwrap()[0].to_f64_vec()
    }

    #[test]
    fn counts_by_hand() {
        let x = [2, 3, 4, 2, 5, 3];
        // Unigrams: 2 twice, 3 twice. Bigrams without skips: [2 3] once; [4 5] never.
        assert_eq!(
            run(&vectorizer(1, 2, 0, TfIdfMode::Tf), &x),
            [2.0, 2.0, 1.0, 0.0]
        );
        // Only bigrams, skipping up to 1: [2 3] at (0,1); [4 5] at (2,4) with skip 1;
        // [2 3] at (3,5) with skip 1.
        assert_eq!(
            run(&vectorizer(2, 2, 1, TfIdfMode::Tf), &x),
            [0.0, 0.0, 2.0, 1.0]
        );
        let mut idf = vectorizer(1, 2, 0, TfIdfMode::Idf);
        idf.weights = vec![0.5, 0.25, 2.0, 4.0];
        assert_eq!(run(&idf, &x), [0.5, 0.25, 2.0, 0.0]);
        idf.mode = TfIdfMode::TfIdf;
        assert_eq!(run(&idf, &x), [1.0, 0.5, 2.0, 0.0]);
    }

    #[test]
    fn a_pool_of_strings_counts_strings() {
        // The integer test's pool with 2 -> "b", 3 -> "c", 4 -> "d", 5 -> "e".
        let mut op = vectorizer(1, 2, 0, TfIdfMode::Tf);
        let words: Vec<String> = ["b", "c", "b", "c", "d", "e"].map(String::from).to_vec();
        (op.pool, op.vocabulary) = TfIdfVectorizer::string_pool(&words);
        assert_eq!(op.pool, [0, 1, 0, 1, 2, 3]);
        let text = ["b", "c", "d", "b", "e", "c", "zz"]
            .map(String::from)
            .to_vec();
        let x = Tensor::from_strings(&[7], text).unwrap();
        let y = op.eval(&[Some(&x)]).unwrap().remove(0);
        assert_eq!(y.to_f64_vec(), [2.0, 2.0, 1.0, 0.0]);
        // Integers against a pool of strings, and strings against one of integers, are errors.
        let ints = Tensor::from_vec(&[2], vec![0i64, 1]).unwrap();
        assert!(op.eval(&[Some(&ints)]).is_err());
        let op = vectorizer(1, 2, 0, TfIdfMode::Tf);
        assert!(op.eval(&[Some(&x)]).is_err());
    }

    #[test]
    fn bad_pools_are_errors() {
        let mut op = vectorizer(1, 2, 0, TfIdfMode::Tf);
        op.ngram_counts = vec![0, 3];
        let x = Tensor::from_vec(&[2], vec![2i64, 3]).unwrap();
        assert!(op.eval(&[Some(&x)]).is_err());
        let mut op = vectorizer(1, 2, 0, TfIdfMode::Tf);
        op.ngram_counts = vec![0, 9];
        assert!(op.eval(&[Some(&x)]).is_err());
        let mut op = vectorizer(1, 2, 0, TfIdfMode::Tf);
        op.ngram_indexes = vec![0, 1, 2, 1 << 60];
        assert!(op.eval(&[Some(&x)]).is_err());
        // Huge skips and lengths find nothing past the row, quickly.
        let mut op = vectorizer(1, usize::MAX, usize::MAX, TfIdfMode::Tf);
        op.max_gram_length = usize::MAX;
        assert_eq!(
            op.eval(&[Some(&x)]).unwrap()[0].to_f64_vec(),
            [1.0, 1.0, 1.0, 0.0]
        );
    }
}
