//! Assembling a step's WGSL: the bindings every kernel shares, the body, and the entry point
//! that maps the 2-D dispatch grid back to the step's item index.

use crate::kernels::{Elem, Grid, Step};
use std::fmt::Write as _;

/// Invocations per workgroup, for every kernel.
pub(crate) const WORKGROUP: u32 = 64;

/// Largest workgroup count in one dispatch dimension (the WebGPU default limit).
const MAX_GROUPS_PER_DIM: u64 = 65535;

/// The whole shader of a step.
pub(crate) fn shader(step: &Step) -> String {
    let mut s = String::from("@group(0) @binding(0) var<storage, read> p: array<u32>;\n");
    for (k, (_, elem)) in step.reads.iter().enumerate() {
        let ty = match elem {
            Elem::F32 => "f32",
            Elem::U32 => "u32",
        };
        let _ = writeln!(
            s,
            "@group(0) @binding({}) var<storage, read> in{k}: array<{ty}>;",
            k + 1
        );
    }
    let _ = writeln!(
        s,
        "@group(0) @binding({}) var<storage, read_write> out: array<f32>;",
        step.reads.len() + 1
    );
    s.push_str(&step.body);
    match step.grid {
        Grid::Threads(_) => s.push_str(
            "@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.x + gid.y * nwg.x * 64u;
  if (i < p[0]) { run(i); }
}
",
        ),
        // Every lane of a workgroup must reach the barriers, so the extra workgroups of a 2-D
        // grid redo the last item instead of returning early.
        Grid::Groups(_) => s.push_str(
            "@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  run_group(min(wid.x + wid.y * nwg.x, p[0] - 1u), lid.x);
}
",
        ),
    }
    s
}

/// The workgroup counts (x, y) of a step's dispatch; `None` when it has nothing to do.
pub(crate) fn dispatch_size(grid: Grid) -> Option<(u32, u32)> {
    let groups = match grid {
        Grid::Threads(n) => n.div_ceil(WORKGROUP as u64),
        Grid::Groups(n) => n,
    };
    if groups == 0 {
        return None;
    }
    let x = groups.min(MAX_GROUPS_PER_DIM);
    let y = groups.div_ceil(x);
    Some((x as u32, y as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispatch_covers_every_item_within_the_per_dimension_limit() {
        assert_eq!(dispatch_size(Grid::Threads(0)), None);
        assert_eq!(dispatch_size(Grid::Threads(1)), Some((1, 1)));
        assert_eq!(dispatch_size(Grid::Threads(64 * 3 + 1)), Some((4, 1)));
        let (x, y) = dispatch_size(Grid::Threads(64 * 70000)).unwrap();
        assert!(x as u64 <= MAX_GROUPS_PER_DIM && (x as u64 * y as u64) >= 70000);
        let (x, y) = dispatch_size(Grid::Groups(200_000)).unwrap();
        assert!(x as u64 * y as u64 >= 200_000);
    }
}
