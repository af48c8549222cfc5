//! Text recognition's two ends: the character dictionary and CTC greedy decoding.

/// The recognizer's output classes: index 0 is the CTC blank, then the dictionary's characters,
/// then a space (PaddleOCR's `use_space_char`).
#[derive(Clone, Debug)]
pub struct Dictionary {
    classes: Vec<String>,
}

impl Dictionary {
    /// Builds the classes from a dictionary with one character per line, split as Python's
    /// `str.splitlines` splits (PP-OCR models carry it in their metadata under `character`).
    pub fn from_lines(text: &str) -> Dictionary {
        let mut classes = vec![String::new()];
        classes.extend(split_lines(text).map(str::to_string));
        classes.push(" ".into());
        Dictionary { classes }
    }

    /// The number of classes, blank and space included.
    pub fn len(&self) -> usize {
        self.classes.len()
    }

    /// Whether there are no characters besides the blank and the space.
    pub fn is_empty(&self) -> bool {
        self.classes.len() <= 2
    }

    /// Greedy CTC decoding of one sequence of `steps` class distributions (`probs` is
    /// `[steps, classes]`): the most likely class per step, repeats merged, blanks dropped.
    /// The score is the mean probability of the kept steps (0 when none is kept).
    pub fn decode(&self, probs: &[f32], classes: usize) -> (String, f32) {
        let mut text = String::new();
        let (mut sum, mut kept) = (0f64, 0usize);
        let mut previous = None;
        for step in probs.chunks_exact(classes) {
            let (best, p) =
                step.iter().enumerate().fold(
                    (0, f32::MIN),
                    |(bi, bp), (i, &p)| if p > bp { (i, p) } else { (bi, bp) },
                );
            if best != 0 && previous != Some(best) {
                // A class the model has but the dictionary lacks reads as nothing.
                if let Some(c) = self.classes.get(best) {
                    text.push_str(c);
                }
                sum += p as f64;
                kept += 1;
            }
            previous = Some(best);
        }
        let score = if kept == 0 {
            0.0
        } else {
            (sum / kept as f64) as f32
        };
        (text, score)
    }
}

/// Python's `str.splitlines()`: splits at \n, \r, \r\n, \x0b, \x0c, \x1c-\x1e, \x85, U+2028
/// and U+2029, with no empty piece after a final break.
fn split_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let is_break = |c: char| {
            matches!(
                c,
                '\n' | '\r'
                    | '\x0b'
                    | '\x0c'
                    | '\x1c'
                    | '\x1d'
                    | '\x1e'
                    | '\u{85}'
                    | '\u{2028}'
                    | '\u{2029}'
            )
        };
        match rest.char_indices().find(|&(_, c)| is_break(c)) {
            Some((at, c)) => {
                let line = &rest[..at];
                let mut next = at + c.len_utf8();
                if c == '\r' && rest[next..].starts_with('\n') {
                    next += 1;
                }
                rest = &rest[next..];
                Some(line)
            }
            None => {
                let line = rest;
                rest = "";
                Some(line)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_as_python_splits_them() {
        let lines: Vec<&str> = split_lines("a\nb\r\nc\rd\u{2028}e\n").collect();
        assert_eq!(lines, ["a", "b", "c", "d", "e"]);
        assert_eq!(split_lines("").count(), 0);
        let d = Dictionary::from_lines("a\nb\n");
        assert_eq!(d.len(), 4);
    }

    #[test]
    fn ctc_merges_repeats_and_drops_blanks() {
        let dict = Dictionary::from_lines("a\nb");
        // Classes: blank, a, b, space. Steps: a a blank a b space b b.
        let steps = [1, 1, 0, 1, 2, 3, 2, 2];
        let mut probs = Vec::new();
        for &s in &steps {
            let mut row = [0.1f32; 4];
            row[s] = 0.7;
            probs.extend_from_slice(&row);
        }
        let (text, score) = dict.decode(&probs, 4);
        assert_eq!(text, "aab b");
        assert!((score - 0.7).abs() < 1e-6);
        let (empty, zero) = dict.decode(&[0.9, 0.1, 0.0, 0.0], 4);
        assert_eq!((empty.as_str(), zero), ("", 0.0));
    }
}
