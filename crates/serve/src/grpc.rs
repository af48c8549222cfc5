//! The gRPC face: `inference.GRPCInferenceService` on tonic's HTTP/2 server.
//!
//! tonic-build would generate this routing from the .proto, but it needs protoc; the six
//! methods are routed here by hand instead, each a plain function from request to response.
//! Outputs always come back in `raw_output_contents`, as Triton does, which every client
//! reads.

use crate::codec::{datatype_name, to_raw, InputSpec};
use crate::error::ServeError;
use crate::metrics::{Outcome, Protocol};
use crate::model::metadata_shape;
use crate::proto::*;
use crate::{infer, Inference, RequestedOutput, State, EXTENSIONS};
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;
use tonic::codec::ProstCodec;
use tonic::codegen::{http, Body, BoxFuture, Context, Poll, Service, StdError};
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::Status;

/// The service, routing by method path.
#[derive(Clone)]
pub struct InferenceService {
    state: Arc<State>,
}

impl InferenceService {
    pub fn new(state: Arc<State>) -> InferenceService {
        InferenceService { state }
    }
}

/// Serves until `stop` resolves, then lets the calls in flight finish.
pub async fn serve(
    state: Arc<State>,
    listener: tokio::net::TcpListener,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    let incoming = tonic::transport::server::TcpIncoming::from_listener(listener, true, None)
        .map_err(|e| format!("gRPC listener: {e}"))?;
    // A 600 KB image in 64 KB flow-control windows would take ten round trips; open the
    // windows to what one request may hold.
    let window = u32::try_from(state.max_body_bytes)
        .unwrap_or(u32::MAX)
        .min((1 << 31) - 1);
    tonic::transport::Server::builder()
        .initial_stream_window_size(window)
        .initial_connection_window_size(window)
        // Fewer, larger frames for big tensors (the largest HTTP/2 allows is 16 MiB - 1).
        .max_frame_size(Some((1 << 24) - 1))
        .add_service(InferenceService::new(state))
        .serve_with_incoming_shutdown(incoming, stop)
        .await
        .map_err(|e| format!("gRPC server: {e}"))
}

type Handler<Req, Resp> = fn(Arc<State>, Req) -> BoxFuture<Resp, Status>;

/// One method: its handler and the state it runs on.
struct Method<Req, Resp> {
    state: Arc<State>,
    handler: Handler<Req, Resp>,
}

impl<Req: Send + 'static, Resp: Send + 'static> UnaryService<Req> for Method<Req, Resp> {
    type Response = Resp;
    type Future = BoxFuture<tonic::Response<Resp>, Status>;

    fn call(&mut self, request: tonic::Request<Req>) -> Self::Future {
        let reply = (self.handler)(self.state.clone(), request.into_inner());
        Box::pin(async move { reply.await.map(tonic::Response::new) })
    }
}

/// Decodes, handles and encodes one unary call.
fn unary<Req, Resp, B>(
    state: Arc<State>,
    handler: Handler<Req, Resp>,
    request: http::Request<B>,
) -> BoxFuture<http::Response<tonic::body::BoxBody>, Infallible>
where
    Req: prost::Message + Default + Send + 'static,
    Resp: prost::Message + Send + 'static,
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    let limit = state.max_body_bytes;
    Box::pin(async move {
        let mut grpc = Grpc::new(ProstCodec::<Resp, Req>::default())
            .apply_max_message_size_config(Some(limit), Some(usize::MAX));
        Ok(grpc.unary(Method { state, handler }, request).await)
    })
}

impl<B> Service<http::Request<B>> for InferenceService
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::BoxBody>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let s = self.state.clone();
        let method = request
            .uri()
            .path()
            .strip_prefix('/')
            .and_then(|p| p.strip_prefix(SERVICE))
            .and_then(|p| p.strip_prefix('/'));
        match method {
            Some("ServerLive") => unary(s, server_live, request),
            Some("ServerReady") => unary(s, server_ready, request),
            Some("ModelReady") => unary(s, model_ready, request),
            Some("ServerMetadata") => unary(s, server_metadata, request),
            Some("ModelMetadata") => unary(s, model_metadata, request),
            Some("ModelInfer") => unary(s, model_infer, request),
            _ => {
                let path = request.uri().path().to_string();
                Box::pin(async move {
                    Ok(Status::unimplemented(format!(
                        "{path}: not a method of the Open Inference Protocol's {SERVICE}"
                    ))
                    .into_http())
                })
            }
        }
    }
}

impl NamedService for InferenceService {
    const NAME: &'static str = SERVICE;
}

fn server_live(_: Arc<State>, _: ServerLiveRequest) -> BoxFuture<ServerLiveResponse, Status> {
    Box::pin(async { Ok(ServerLiveResponse { live: true }) })
}

fn server_ready(
    state: Arc<State>,
    _: ServerReadyRequest,
) -> BoxFuture<ServerReadyResponse, Status> {
    Box::pin(async move {
        Ok(ServerReadyResponse {
            ready: state.ready(),
        })
    })
}

fn model_ready(state: Arc<State>, r: ModelReadyRequest) -> BoxFuture<ModelReadyResponse, Status> {
    Box::pin(async move {
        state
            .repository
            .get(&r.name, &r.version)
            .map_err(|e| e.grpc_status())?;
        Ok(ModelReadyResponse {
            ready: state.ready(),
        })
    })
}

fn server_metadata(
    _: Arc<State>,
    _: ServerMetadataRequest,
) -> BoxFuture<ServerMetadataResponse, Status> {
    Box::pin(async {
        Ok(ServerMetadataResponse {
            name: "ferrolite".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            extensions: EXTENSIONS.iter().map(|e| e.to_string()).collect(),
        })
    })
}

fn model_metadata(
    state: Arc<State>,
    r: ModelMetadataRequest,
) -> BoxFuture<ModelMetadataResponse, Status> {
    Box::pin(async move {
        let model = state
            .repository
            .get(&r.name, &r.version)
            .map_err(|e| e.grpc_status())?;
        let tensors = |ios: &[ferrolite::IoInfo]| -> Vec<TensorMetadata> {
            ios.iter()
                .map(|io| TensorMetadata {
                    name: io.name.clone(),
                    datatype: datatype_name(io.dtype).unwrap_or("").into(),
                    shape: metadata_shape(io),
                })
                .collect()
        };
        Ok(ModelMetadataResponse {
            name: model.name.clone(),
            versions: vec![model.version.clone()],
            platform: model.platform.clone(),
            inputs: tensors(&model.inputs),
            outputs: tensors(&model.outputs),
        })
    })
}

fn model_infer(state: Arc<State>, r: ModelInferRequest) -> BoxFuture<ModelInferResponse, Status> {
    Box::pin(async move {
        let arrived = Instant::now();
        let model = state
            .repository
            .get(&r.model_name, &r.model_version)
            .map_err(|e| e.grpc_status())?
            .clone();
        let inputs = match decode_inputs(&r) {
            Ok(inputs) => inputs,
            Err(e) => {
                model.metrics.count(Protocol::Grpc, Outcome::ClientError);
                return Err(e.grpc_status());
            }
        };
        let request = Inference {
            model,
            id: r.id.clone(),
            outputs: r
                .outputs
                .iter()
                .map(|o| RequestedOutput {
                    name: o.name.clone(),
                    binary: true,
                })
                .collect(),
        };
        let outputs = infer(&request, inputs, Protocol::Grpc, arrived)
            .await
            .map_err(|e| e.grpc_status())?;
        let mut response = ModelInferResponse {
            model_name: request.model.name.clone(),
            model_version: request.model.version.clone(),
            id: r.id,
            ..Default::default()
        };
        for (name, tensor) in outputs {
            response.outputs.push(InferOutputTensor {
                name,
                datatype: datatype_name(tensor.dtype()).unwrap_or("").into(),
                shape: tensor.shape().iter().map(|&d| d as i64).collect(),
                ..Default::default()
            });
            response.raw_output_contents.push(to_raw(&tensor));
        }
        Ok(response)
    })
}

/// The request's tensors, from `raw_input_contents` (one entry per input, in order) or from
/// each input's typed `contents`.
fn decode_inputs(r: &ModelInferRequest) -> Result<Vec<(String, ferrolite::Tensor)>, ServeError> {
    let raw = !r.raw_input_contents.is_empty();
    if raw && r.raw_input_contents.len() != r.inputs.len() {
        return Err(ServeError::bad_request(format!(
            "raw_input_contents has {} entries for {} inputs; send one per input or none",
            r.raw_input_contents.len(),
            r.inputs.len()
        )));
    }
    let mut out = Vec::with_capacity(r.inputs.len());
    for (i, input) in r.inputs.iter().enumerate() {
        let spec = InputSpec::new(&input.name, &input.datatype, &input.shape)?;
        let tensor = if raw {
            if input.contents.is_some() {
                return Err(ServeError::bad_request(format!(
                    "input '{}' has contents, and raw_input_contents is used too; use one",
                    input.name
                )));
            }
            spec.from_raw(&r.raw_input_contents[i])?
        } else {
            let contents = input.contents.as_ref().ok_or_else(|| {
                ServeError::bad_request(format!(
                    "input '{}' has no contents, and raw_input_contents is empty",
                    input.name
                ))
            })?;
            spec.from_contents(contents)?
        };
        out.push((input.name.clone(), tensor));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(
        name: &str,
        datatype: &str,
        shape: &[i64],
        contents: Option<InferTensorContents>,
    ) -> InferInputTensor {
        InferInputTensor {
            name: name.into(),
            datatype: datatype.into(),
            shape: shape.to_vec(),
            contents,
            ..Default::default()
        }
    }

    #[test]
    fn inputs_come_from_raw_or_typed_contents() {
        let typed = ModelInferRequest {
            inputs: vec![
                input(
                    "a",
                    "INT32",
                    &[2],
                    Some(InferTensorContents {
                        int_contents: vec![-5, 7],
                        ..Default::default()
                    }),
                ),
                input(
                    "b",
                    "BOOL",
                    &[1],
                    Some(InferTensorContents {
                        bool_contents: vec![true],
                        ..Default::default()
                    }),
                ),
            ],
            ..Default::default()
        };
        let t = decode_inputs(&typed).unwrap();
        assert_eq!(t[0].1.as_slice::<i32>().unwrap(), &[-5, 7]);
        assert_eq!(t[1].1.bytes(), &[1]);

        let raw = ModelInferRequest {
            inputs: vec![input("a", "INT32", &[2], None)],
            raw_input_contents: vec![[-5i32, 7]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<u8>>()
                .into()],
            ..Default::default()
        };
        let r = decode_inputs(&raw).unwrap();
        assert_eq!(r[0].1.bytes(), t[0].1.bytes());
    }

    #[test]
    fn inconsistent_requests_are_refused_with_the_input_named() {
        let two_raw_for_one = ModelInferRequest {
            inputs: vec![input("a", "FP32", &[1], None)],
            raw_input_contents: vec![vec![0u8; 4].into(), vec![0u8; 4].into()],
            ..Default::default()
        };
        assert!(decode_inputs(&two_raw_for_one)
            .unwrap_err()
            .message
            .contains("2 entries for 1"));
        let nothing = ModelInferRequest {
            inputs: vec![input("a", "FP32", &[1], None)],
            ..Default::default()
        };
        assert!(decode_inputs(&nothing)
            .unwrap_err()
            .message
            .contains("'a' has no contents"));
        let short = ModelInferRequest {
            inputs: vec![input("a", "FP32", &[2], None)],
            raw_input_contents: vec![vec![0u8; 4].into()],
            ..Default::default()
        };
        assert!(decode_inputs(&short)
            .unwrap_err()
            .message
            .contains("input 'a'"));
        let fp16_typed = ModelInferRequest {
            inputs: vec![input(
                "h",
                "FP16",
                &[1],
                Some(InferTensorContents::default()),
            )],
            ..Default::default()
        };
        assert!(decode_inputs(&fp16_typed)
            .unwrap_err()
            .message
            .contains("raw_input_contents"));
    }
}
