//! CopyToDevice / CopyToHost: moving a tensor between host memory and a device's memory.
//!
//! They only appear inside a [`super::subgraph::Subgraph`]'s graph, at its borders, so that every
//! transfer is a node a device compiles (and `explain` counts). On the host (the reference and
//! the CPU fallback) a copy is the identity.

use crate::op::{input, output};
use crate::{DTypeSet, InferCtx, Op, OpResult, Prototype, Tensor, TensorInfo};

/// Which way a [`DeviceCopy`] moves its tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CopyDirection {
    ToDevice,
    ToHost,
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceCopy {
    pub direction: CopyDirection,
    /// The device's name.
    pub device: String,
}

impl DeviceCopy {
    pub fn to_device(device: &str) -> Self {
        DeviceCopy {
            direction: CopyDirection::ToDevice,
            device: device.to_string(),
        }
    }

    pub fn to_host(device: &str) -> Self {
        DeviceCopy {
            direction: CopyDirection::ToHost,
            device: device.to_string(),
        }
    }
}

static PROTOTYPE: Prototype = Prototype {
    inputs: &[input("input", DTypeSet::ANY)],
    outputs: &[output("output")],
    value_inputs: &[],
};

impl Op for DeviceCopy {
    fn name(&self) -> &'static str {
        match self.direction {
            CopyDirection::ToDevice => "CopyToDevice",
            CopyDirection::ToHost => "CopyToHost",
        }
    }

    fn prototype(&self) -> &'static Prototype {
        &PROTOTYPE
    }

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        Ok(vec![ctx.like(0)?])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = inputs
            .first()
            .copied()
            .flatten()
            .ok_or("input 0 is missing")?;
        Ok(vec![x.clone()])
    }

    fn is_foldable(&self) -> bool {
        false
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
