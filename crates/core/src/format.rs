//! ferrolite's optimized model format (`.flm`), as written by `ferrolite opt`: a graph after
//! every pass, ready to plan, with its weights laid out to be used straight from a memory map.
//! docs/format.md specifies it; this module reads and writes bytes (no file I/O).
//!
//! Layout: a fixed 128-byte header, the graph section (postcard, checksummed), then the data
//! section: every constant's raw little-endian bytes, each starting on a 64-byte boundary.

use crate::graph::{DeclaredType, Graph, Value, ValueId};
use crate::ops::codec::{decode_op, encode_op};
use crate::prepacked::{PackKey, PackedRecord};
use crate::tensor::SharedBytes;
use crate::{DType, Error, Result, Tensor, TensorInfo};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The first eight bytes of every file.
pub const MAGIC: &[u8; 8] = b"FRLTOPT\0";
/// The version this code writes, and the only one it reads. Version 2 stores the channel block
/// in the blocked layout's ops (`ToNchwc`, `Nchwc`), which version 1 fixed at eight.
pub const FORMAT_VERSION: u32 = 2;
/// The header's size; the graph section follows it.
pub const HEADER_LEN: usize = 128;
/// Every tensor's alignment in the file, and the data section's.
pub const ALIGN: usize = 64;

/// Whether `bytes` start like an optimized model (or are a piece of its magic, truncated).
pub fn is_optimized_model(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC) || (!bytes.is_empty() && MAGIC.starts_with(bytes))
}

/// What an optimized model holds besides its graph.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    /// The format the source model came in (`onnx`, `paddle`).
    pub source_format: String,
    pub producer: String,
    pub opsets: Vec<(String, i64)>,
    pub metadata: Vec<(String, String)>,
}

/// For which input shapes the graph was optimized. `None` in a file means the graph is as the
/// frontend built it (symbolic dims kept); the passes then run at prerun, as for the source
/// model. An optimized graph is planned after shape inference alone, which also checks it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Optimized {
    pub input_shapes: Vec<Vec<usize>>,
    /// The CPU ISA whose layout (NCHWc block size) the passes chose: `avx512`, `avx2`,
    /// `portable`. Another ISA cannot run the file; it must be written again for it.
    pub isa: String,
    /// The kernels' prepacked weights for that ISA (see [`crate::prepacked`]); stored in the
    /// data section, not with these fields.
    #[serde(skip)]
    pub packed: Vec<PackedRecord>,
}

/// An optimized model: its graph, the source's details and how it was optimized.
#[derive(Clone, Debug)]
pub struct OptimizedModel {
    pub graph: Graph,
    pub info: ModelInfo,
    pub optimized: Option<Optimized>,
    /// The engine version that wrote the file.
    pub engine_version: String,
}

#[derive(Serialize, Deserialize)]
struct FileGraph {
    info: ModelInfo,
    optimized: Option<Optimized>,
    values: Vec<FileValue>,
    nodes: Vec<FileNode>,
    inputs: Vec<u32>,
    outputs: Vec<u32>,
    packed: Vec<FilePacked>,
}

/// A kernel's prepacked buffer (see [`crate::prepacked`]).
#[derive(Serialize, Deserialize)]
struct FilePacked {
    node: String,
    kernel: String,
    seq: u32,
    desc: Vec<u64>,
    tensor: FileTensor,
}

#[derive(Serialize, Deserialize)]
struct FileValue {
    name: String,
    info: Option<TensorInfo>,
    declared: Option<DeclaredType>,
    constant: Option<FileTensor>,
}

/// A constant in the data section: `offset` from the section's start.
#[derive(Serialize, Deserialize)]
struct FileTensor {
    dtype: DType,
    shape: Vec<usize>,
    offset: u64,
}

#[derive(Serialize, Deserialize)]
struct FileNode {
    name: String,
    /// The op's kind: its tag in [`crate::ops::codec`].
    kind: String,
    attrs: Vec<u8>,
    inputs: Vec<Option<u32>>,
    outputs: Vec<u32>,
}

/// FNV-1a, 64 bits: enough to catch a flipped bit or a truncated section, and quick.
pub fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Rewrites the graph section's checksum to match its bytes, when the header's offsets lie in
/// the file. For tools that edit a file, and for the fuzzer, whose mutations would otherwise
/// stop at the checksum.
pub fn reseal(file: &mut [u8]) {
    if file.len() < HEADER_LEN || !file.starts_with(MAGIC) {
        return;
    }
    let (at, len) = (u64_at(file, 64), u64_at(file, 72));
    let Some(end) = at.checked_add(len).filter(|&e| e <= file.len() as u64) else {
        return;
    };
    let sum = checksum(&file[at as usize..end as usize]);
    file[80..88].copy_from_slice(&sum.to_le_bytes());
}

fn fixed_str<const N: usize>(s: &str) -> [u8; N] {
    let mut out = [0u8; N];
    let n = s.len().min(N);
    out[..n].copy_from_slice(&s.as_bytes()[..n]);
    out
}

fn read_fixed_str(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// Writes a graph as an optimized model.
pub fn write(
    graph: &Graph,
    info: &ModelInfo,
    optimized: Option<&Optimized>,
    engine_version: &str,
) -> Result<Vec<u8>> {
    // Only the values the graph still uses: passes leave folded-away weights behind.
    let mut new_id: Vec<Option<u32>> = vec![None; graph.values.len()];
    let used = graph
        .nodes
        .iter()
        .flat_map(|n| n.inputs.iter().flatten().chain(&n.outputs))
        .chain(&graph.inputs)
        .chain(&graph.outputs);
    for v in used {
        new_id[v.0] = Some(0);
    }
    let mut kept = 0u32;
    for id in new_id.iter_mut().flatten() {
        *id = kept;
        kept += 1;
    }
    let id32 = |v: ValueId| -> Result<u32> {
        new_id[v.0].ok_or_else(|| Error::InvalidModel("a used value was dropped".into()))
    };
    let mut data: Vec<u8> = Vec::new();
    let mut store = |t: &Tensor| {
        data.resize(data.len().next_multiple_of(ALIGN), 0);
        let offset = data.len() as u64;
        data.extend_from_slice(t.bytes());
        FileTensor {
            dtype: t.dtype(),
            shape: t.shape().to_vec(),
            offset,
        }
    };
    let mut values = Vec::with_capacity(kept as usize);
    for (v, _) in graph
        .values
        .iter()
        .zip(&new_id)
        .filter(|(_, id)| id.is_some())
    {
        let constant = v.constant.as_ref().map(&mut store);
        values.push(FileValue {
            name: v.name.clone(),
            info: v.info.clone(),
            declared: v.declared.clone(),
            constant,
        });
    }
    let mut nodes = Vec::with_capacity(graph.nodes.len());
    for n in &graph.nodes {
        let (kind, attrs) = encode_op(n.op.as_ref())
            .map_err(|e| Error::InvalidModel(format!("node '{}': {e}", n.name)))?;
        nodes.push(FileNode {
            name: n.name.clone(),
            kind: kind.to_string(),
            attrs,
            inputs: n
                .inputs
                .iter()
                .map(|i| i.map(id32).transpose())
                .collect::<Result<_>>()?,
            outputs: n.outputs.iter().map(|&v| id32(v)).collect::<Result<_>>()?,
        });
    }
    let packed = optimized
        .map_or(&[][..], |o| &o.packed[..])
        .iter()
        .map(|r| FilePacked {
            node: r.key.node.clone(),
            kernel: r.key.kernel.clone(),
            seq: r.key.seq,
            desc: r.desc.clone(),
            tensor: store(&r.tensor),
        })
        .collect();
    let ids = |v: &[ValueId]| v.iter().map(|&v| id32(v)).collect::<Result<Vec<_>>>();
    let file_graph = FileGraph {
        info: info.clone(),
        optimized: optimized.cloned(),
        values,
        nodes,
        inputs: ids(&graph.inputs)?,
        outputs: ids(&graph.outputs)?,
        packed,
    };
    let section = postcard::to_allocvec(&file_graph)
        .map_err(|e| Error::InvalidModel(format!("cannot encode the graph: {e}")))?;
    let graph_offset = HEADER_LEN;
    let data_offset = (graph_offset + section.len()).next_multiple_of(ALIGN);
    let mut out = Vec::with_capacity(data_offset + data.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(HEADER_LEN as u32).to_le_bytes());
    out.extend_from_slice(&fixed_str::<32>(engine_version));
    out.extend_from_slice(&fixed_str::<16>(optimized.map_or("", |o| o.isa.as_str())));
    for n in [
        graph_offset as u64,
        section.len() as u64,
        checksum(&section),
        data_offset as u64,
        data.len() as u64,
    ] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    out.resize(HEADER_LEN, 0);
    out.extend_from_slice(&section);
    out.resize(data_offset, 0);
    out.extend_from_slice(&data);
    Ok(out)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]))
}

fn bad(msg: impl Into<String>) -> Error {
    Error::InvalidModel(format!("optimized model: {}", msg.into()))
}

/// The header's fields, checked against the file's size.
struct Header {
    version: u32,
    engine_version: String,
    graph: std::ops::Range<usize>,
    checksum: u64,
    data: std::ops::Range<usize>,
}

fn read_header(b: &[u8]) -> Result<Header> {
    if !is_optimized_model(b) {
        return Err(bad("not a ferrolite optimized model (wrong magic)"));
    }
    if b.len() < HEADER_LEN {
        return Err(bad(format!(
            "truncated: {} bytes, the header alone is {HEADER_LEN}",
            b.len()
        )));
    }
    let version = u32_at(b, 8);
    let engine_version = read_fixed_str(&b[16..48]);
    if version != FORMAT_VERSION {
        return Err(Error::InvalidModel(format!(
            "optimized model format version {version} is not supported (this build of \
             ferrolite reads version {FORMAT_VERSION}; the file was written by ferrolite \
             {engine_version})"
        )));
    }
    if u32_at(b, 12) as usize != HEADER_LEN {
        return Err(bad(format!(
            "header length {} is not {HEADER_LEN}",
            u32_at(b, 12)
        )));
    }
    let range = |what: &str, start: u64, len: u64| -> Result<std::ops::Range<usize>> {
        let end = start.checked_add(len);
        match end {
            Some(end) if end <= b.len() as u64 && start >= HEADER_LEN as u64 => {
                Ok(start as usize..end as usize)
            }
            _ => Err(bad(format!(
                "the {what} section ({len} bytes at {start}) lies outside the file of {} bytes \
                 (truncated?)",
                b.len()
            ))),
        }
    };
    let graph = range("graph", u64_at(b, 64), u64_at(b, 72))?;
    let data = range("data", u64_at(b, 88), u64_at(b, 96))?;
    if !data.start.is_multiple_of(ALIGN) {
        return Err(bad(format!(
            "the data section starts at {}, not on a {ALIGN}-byte boundary",
            data.start
        )));
    }
    Ok(Header {
        version,
        engine_version,
        graph,
        checksum: u64_at(b, 80),
        data,
    })
}

/// Reads an optimized model. Constants view `owner`'s bytes in place when they are aligned in
/// memory (a memory-mapped file is); otherwise they are copied.
pub fn read(owner: Arc<dyn SharedBytes>) -> Result<OptimizedModel> {
    let b = owner.bytes();
    let h = read_header(b)?;
    debug_assert_eq!(h.version, FORMAT_VERSION);
    let section = &b[h.graph.clone()];
    if checksum(section) != h.checksum {
        return Err(bad(
            "the graph section's checksum does not match (the file is damaged)",
        ));
    }
    let fg: FileGraph =
        postcard::from_bytes(section).map_err(|e| bad(format!("malformed graph section: {e}")))?;
    let n_values = fg.values.len();
    let value = |i: u32, what: &str| -> Result<ValueId> {
        if (i as usize) < n_values {
            Ok(ValueId(i as usize))
        } else {
            Err(bad(format!(
                "{what} refers to value {i}; there are {n_values}"
            )))
        }
    };
    // A tensor of the data section, viewed in place; its place and size checked first.
    let tensor = |name: &str, ft: &FileTensor| -> Result<Tensor> {
        let at = usize::try_from(ft.offset).unwrap_or(usize::MAX);
        if !at.is_multiple_of(ALIGN) {
            return Err(bad(format!(
                "tensor '{name}' at data offset {at} is not {ALIGN}-byte aligned"
            )));
        }
        let len = crate::tensor::checked_numel(&ft.shape)
            .ok()
            .and_then(|n| n.checked_mul(ft.dtype.size()));
        match len.and_then(|len| at.checked_add(len)) {
            Some(end) if end <= h.data.len() => {}
            _ => {
                return Err(bad(format!(
                    "tensor '{name}' ({} {:?} at data offset {at}) lies outside the data \
                     section of {} bytes",
                    ft.dtype,
                    ft.shape,
                    h.data.len()
                )))
            }
        }
        Tensor::from_shared(ft.dtype, &ft.shape, owner.clone(), h.data.start + at)
            .map_err(|e| bad(format!("tensor '{name}': {e}")))
    };
    let mut g = Graph::new();
    for v in fg.values {
        let constant = match &v.constant {
            None => None,
            Some(ft) => Some(tensor(&v.name, ft)?),
        };
        g.values.push(Value {
            name: v.name,
            producer: None,
            constant,
            info: v.info,
            declared: v.declared,
        });
    }
    for n in fg.nodes {
        let op =
            decode_op(&n.kind, &n.attrs).map_err(|e| bad(format!("node '{}': {e}", n.name)))?;
        let what = format!("node '{}'", n.name);
        let inputs = n
            .inputs
            .iter()
            .map(|i| i.map(|i| value(i, &what)).transpose())
            .collect::<Result<Vec<_>>>()?;
        let outputs = n
            .outputs
            .iter()
            .map(|&i| value(i, &what))
            .collect::<Result<Vec<_>>>()?;
        g.add_node(n.name, op, inputs, outputs)?;
    }
    g.inputs = fg
        .inputs
        .iter()
        .map(|&i| value(i, "a graph input"))
        .collect::<Result<_>>()?;
    g.outputs = fg
        .outputs
        .iter()
        .map(|&i| value(i, "a graph output"))
        .collect::<Result<_>>()?;
    // Node order, cycles, and values that nothing produces.
    g.sort()
        .map_err(|e| bad(format!("inconsistent graph: {e}")))?;
    let mut optimized = fg.optimized;
    if let Some(o) = &mut optimized {
        for p in fg.packed {
            let what = format!("prepacked {}#{} of node '{}'", p.kernel, p.seq, p.node);
            o.packed.push(PackedRecord {
                tensor: tensor(&what, &p.tensor)?,
                key: PackKey {
                    node: p.node,
                    kernel: p.kernel,
                    seq: p.seq,
                },
                desc: p.desc,
            });
        }
    }
    Ok(OptimizedModel {
        graph: g,
        info: fg.info,
        optimized,
        engine_version: h.engine_version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::binary::{Binary, BinaryKind};

    /// y = x + w, with w a constant of 100 floats.
    fn small() -> Vec<u8> {
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let w = Tensor::from_vec(&[100], (0..100).map(|i| i as f32).collect()).unwrap();
        let w = g.add_constant("w", w);
        let add = Arc::new(Binary {
            kind: BinaryKind::Add,
            legacy_axis: None,
        });
        let y = g.add_op("add", add, vec![Some(x), Some(w)], 1).unwrap()[0];
        g.outputs.push(y);
        write(&g, &ModelInfo::default(), None, "test").unwrap()
    }

    /// The file with its graph section edited (and its checksum made right again).
    fn edited(file: &[u8], edit: impl FnOnce(&mut FileGraph)) -> Vec<u8> {
        let h = read_header(file).unwrap();
        let mut fg: FileGraph = postcard::from_bytes(&file[h.graph.clone()]).unwrap();
        edit(&mut fg);
        let section = postcard::to_allocvec(&fg).unwrap();
        let data_offset = (HEADER_LEN + section.len()).next_multiple_of(ALIGN);
        let mut out = file[..HEADER_LEN].to_vec();
        out[72..80].copy_from_slice(&(section.len() as u64).to_le_bytes());
        out[80..88].copy_from_slice(&checksum(&section).to_le_bytes());
        out[88..96].copy_from_slice(&(data_offset as u64).to_le_bytes());
        out.extend_from_slice(&section);
        out.resize(data_offset, 0);
        out.extend_from_slice(&file[h.data]);
        out
    }

    fn error(file: Vec<u8>) -> String {
        read(Arc::new(file)).unwrap_err().to_string()
    }

    #[test]
    fn a_written_graph_reads_back() {
        let m = read(Arc::new(small())).unwrap();
        assert_eq!(m.graph.nodes.len(), 1);
        assert_eq!(m.graph.nodes[0].op.name(), "Add");
        let w = m.graph.values[1].constant.as_ref().unwrap();
        assert_eq!(w.as_slice::<f32>().unwrap()[99], 99.0);
        assert_eq!(m.engine_version, "test");
    }

    #[test]
    fn hostile_graph_sections_are_typed_errors() {
        let file = small();
        let e = error(edited(&file, |g| g.nodes[0].kind = "Teleport".into()));
        assert!(e.contains("unknown op kind 'Teleport'"), "{e}");
        let e = error(edited(&file, |g| g.nodes[0].attrs = vec![200]));
        assert!(e.contains("malformed attributes"), "{e}");
        let e = error(edited(&file, |g| {
            g.values[1].constant.as_mut().unwrap().offset = 8
        }));
        assert!(e.contains("not 64-byte aligned"), "{e}");
        let e = error(edited(&file, |g| {
            g.values[1].constant.as_mut().unwrap().offset = 1 << 40
        }));
        assert!(e.contains("outside the data section"), "{e}");
        let e = error(edited(&file, |g| {
            g.values[1].constant.as_mut().unwrap().shape = vec![1 << 62, 1 << 62]
        }));
        assert!(e.contains("outside the data section"), "{e}");
        let e = error(edited(&file, |g| g.nodes[0].inputs[0] = Some(77)));
        assert!(e.contains("refers to value 77"), "{e}");
        // A node reading its own output: a cycle.
        let e = error(edited(&file, |g| g.nodes[0].inputs[0] = Some(2)));
        assert!(e.contains("cycle") || e.contains("inconsistent"), "{e}");
        let e = error(edited(&file, |g| g.outputs = vec![0, 9]));
        assert!(e.contains("refers to value 9"), "{e}");
    }
}
