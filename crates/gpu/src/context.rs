//! The opened GPU: wgpu device and queue, its limits, and the compute pipelines built so far
//! (one per distinct shader text, shared by every subgraph of every session on the device).

use crate::kernels::Limits;
use ferrolite_core::{Error, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub(crate) struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub limits: Limits,
    /// Bind group layouts and pipeline layouts by number of read bindings.
    layouts: Mutex<HashMap<usize, Arc<(wgpu::BindGroupLayout, wgpu::PipelineLayout)>>>,
    pipelines: Mutex<HashMap<String, Arc<wgpu::ComputePipeline>>>,
    /// Errors wgpu reported outside any error scope (it would panic otherwise).
    uncaptured: Arc<Mutex<Vec<String>>>,
    /// wgpu's error scopes are one stack per device, so compiles and runs that use them take
    /// turns (the device runs one submission at a time anyway).
    pub exclusive: Mutex<()>,
}

fn gpu_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Other(format!("GPU: {what}: {e}"))
}

impl Gpu {
    /// Opens the first adapter wgpu finds (high-performance preferred) on Vulkan, Metal or
    /// DX12; `WGPU_BACKEND` narrows the backends.
    pub(crate) fn open() -> Result<Gpu> {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = wgpu::Backends::from_env().unwrap_or(wgpu::Backends::PRIMARY);
        let instance = wgpu::Instance::new(desc);
        let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            force_fallback_adapter: false,
            compatible_surface: None,
            apply_limit_buckets: false,
        }))
        .map_err(|e| gpu_error("no adapter", e))?;
        let info = adapter.get_info();
        let required_limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("ferrolite"),
            required_limits: required_limits.clone(),
            ..Default::default()
        }))
        .map_err(|e| gpu_error("could not open the device", e))?;
        let uncaptured: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = uncaptured.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut l) = sink.lock() {
                l.push(e.to_string());
            }
        }));
        let max_binding_bytes = required_limits
            .max_storage_buffer_binding_size
            .min(required_limits.max_buffer_size);
        Ok(Gpu {
            device,
            queue,
            info,
            limits: Limits { max_binding_bytes },
            layouts: Mutex::default(),
            pipelines: Mutex::default(),
            uncaptured,
            exclusive: Mutex::new(()),
        })
    }

    /// The errors reported outside error scopes since the last call.
    pub(crate) fn take_uncaptured(&self) -> Option<String> {
        let mut l = self.uncaptured.lock().ok()?;
        if l.is_empty() {
            None
        } else {
            Some(std::mem::take(&mut *l).join("; "))
        }
    }

    /// The layouts of a kernel with `reads` read bindings: `p`, the reads, then `out`.
    pub(crate) fn layouts(
        &self,
        reads: usize,
    ) -> Result<Arc<(wgpu::BindGroupLayout, wgpu::PipelineLayout)>> {
        let mut map = self
            .layouts
            .lock()
            .map_err(|_| Error::Other("GPU layout cache poisoned".into()))?;
        if let Some(l) = map.get(&reads) {
            return Ok(l.clone());
        }
        let entry = |binding: u32, read_only: bool| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        };
        let entries: Vec<_> = (0..=reads as u32)
            .map(|b| entry(b, true))
            .chain([entry(reads as u32 + 1, false)])
            .collect();
        let bind = self
            .device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: None,
                entries: &entries,
            });
        let pipeline = self
            .device
            .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: None,
                bind_group_layouts: &[Some(&bind)],
                immediate_size: 0,
            });
        let l = Arc::new((bind, pipeline));
        map.insert(reads, l.clone());
        Ok(l)
    }

    /// The pipeline of a shader (built once per distinct text).
    pub(crate) fn pipeline(
        &self,
        source: &str,
        reads: usize,
    ) -> Result<Arc<wgpu::ComputePipeline>> {
        if let Some(p) = self
            .pipelines
            .lock()
            .map_err(|_| Error::Other("GPU pipeline cache poisoned".into()))?
            .get(source)
        {
            return Ok(p.clone());
        }
        let layouts = self.layouts(reads)?;
        // A shader that does not validate must fail this compile, not be cached.
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = self
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: None,
                source: wgpu::ShaderSource::Wgsl(source.into()),
            });
        let pipeline = Arc::new(self.device.create_compute_pipeline(
            &wgpu::ComputePipelineDescriptor {
                label: None,
                layout: Some(&layouts.1),
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            },
        ));
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(gpu_error("a kernel did not compile", e));
        }
        if let Ok(mut map) = self.pipelines.lock() {
            map.insert(source.to_string(), pipeline.clone());
        }
        Ok(pipeline)
    }
}
