//! The REST face: the protocol's `/v2/...` routes, the binary tensor extension, and
//! `/metrics`.
//!
//! Binary extension: when the request has an `Inference-Header-Content-Length: N` header, the
//! first N bytes of the body are the JSON header and the rest holds, back to back, the inputs
//! whose `parameters` give a `binary_data_size`. Outputs asked for with `binary_data: true`
//! (or all of them with the request's `binary_data_output: true`) come back the same way.

use crate::codec::{datatype_name, to_json, to_raw, InputSpec};
use crate::error::{ErrorKind, ServeError};
use crate::metrics::{self, Outcome, Protocol};
use crate::model::metadata_shape;
use crate::{infer, Inference, RequestedOutput, State, EXTENSIONS};
use axum::body::{Body, Bytes};
use axum::extract::{Path, State as Shared};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Map, Value};
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

const HEADER_LENGTH: &str = "inference-header-content-length";

type AppState = Shared<Arc<State>>;

impl IntoResponse for ServeError {
    fn into_response(self) -> Response {
        let body = json!({ "error": self.message }).to_string();
        (
            self.http_status(),
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response()
    }
}

fn json_response(value: Value) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

/// The routes, on shared state.
pub fn router(state: Arc<State>) -> Router {
    Router::new()
        .route("/v2/health/live", get(|| async { StatusCode::OK }))
        .route("/v2/health/ready", get(server_ready))
        .route("/v2", get(server_metadata))
        .route("/v2/models/:name", get(model_metadata))
        .route(
            "/v2/models/:name/versions/:version",
            get(model_metadata_version),
        )
        .route("/v2/models/:name/ready", get(model_ready))
        .route(
            "/v2/models/:name/versions/:version/ready",
            get(model_ready_version),
        )
        .route("/v2/models/:name/infer", post(model_infer))
        .route(
            "/v2/models/:name/versions/:version/infer",
            post(model_infer_version),
        )
        .route("/metrics", get(metrics_text))
        .fallback(|| async {
            ServeError::not_found("no such route (see the Open Inference Protocol's /v2 routes)")
        })
        .with_state(state)
}

/// Serves until `stop` resolves, then lets the requests in flight finish.
pub async fn serve(
    state: Arc<State>,
    listener: tokio::net::TcpListener,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(stop)
        .await
        .map_err(|e| format!("HTTP server: {e}"))
}

async fn server_ready(Shared(state): AppState) -> StatusCode {
    if state.ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

async fn server_metadata() -> Response {
    json_response(json!({
        "name": "ferrolite",
        "version": env!("CARGO_PKG_VERSION"),
        "extensions": EXTENSIONS,
    }))
}

async fn model_metadata(state: AppState, Path(name): Path<String>) -> Result<Response, ServeError> {
    model_metadata_version(state, Path((name, String::new()))).await
}

async fn model_metadata_version(
    Shared(state): AppState,
    Path((name, version)): Path<(String, String)>,
) -> Result<Response, ServeError> {
    let model = state.repository.get(&name, &version)?;
    let tensors = |ios: &[ferrolite::IoInfo]| -> Vec<Value> {
        ios.iter()
            .map(|io| {
                json!({
                    "name": io.name,
                    "datatype": datatype_name(io.dtype).unwrap_or(""),
                    "shape": metadata_shape(io),
                })
            })
            .collect()
    };
    Ok(json_response(json!({
        "name": model.name,
        "versions": [model.version],
        "platform": model.platform,
        "inputs": tensors(&model.inputs),
        "outputs": tensors(&model.outputs),
    })))
}

async fn model_ready(state: AppState, Path(name): Path<String>) -> Result<StatusCode, ServeError> {
    model_ready_version(state, Path((name, String::new()))).await
}

async fn model_ready_version(
    Shared(state): AppState,
    Path((name, version)): Path<(String, String)>,
) -> Result<StatusCode, ServeError> {
    state.repository.get(&name, &version)?;
    Ok(if state.ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    })
}

async fn metrics_text(Shared(state): AppState) -> Response {
    let snapshots: Vec<_> = state
        .repository
        .models
        .iter()
        .map(|m| m.snapshot())
        .collect();
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        metrics::render(&snapshots),
    )
        .into_response()
}

async fn model_infer(
    state: AppState,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    model_infer_version(state, Path((name, String::new())), headers, body).await
}

async fn model_infer_version(
    Shared(state): AppState,
    Path((name, version)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let model = match state.repository.get(&name, &version) {
        Ok(m) => m.clone(),
        Err(e) => return e.into_response(),
    };
    let body = read_body(&state, &headers, body).await;
    // Arrival: the whole request received, as for gRPC (tonic hands its handler the decoded
    // message). From the headers on, the time also held the client's upload of the body:
    // 5-21 ms for the test's twelve concurrent Python clients, more than a refusal's work.
    let arrived = Instant::now();
    let decoded = body.and_then(|bytes| decode_request(model.clone(), &headers, &bytes));
    let Decoded {
        request,
        inputs,
        binary_all,
    } = match decoded {
        Ok(d) => d,
        Err(e) => {
            model.metrics.count(Protocol::Http, Outcome::ClientError);
            return e.into_response();
        }
    };
    match infer(&request, inputs, Protocol::Http, arrived).await {
        Ok(outputs) => encode_response(&request, outputs, binary_all),
        Err(e) => e.into_response(),
    }
}

async fn read_body(state: &State, headers: &HeaderMap, body: Body) -> Result<Bytes, ServeError> {
    let limit = state.max_body_bytes;
    let too_large = || {
        ServeError::new(
            ErrorKind::TooLarge,
            format!("the request body is over the server's limit of {limit} bytes (--max-body-mb)"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    if let Some(enc) = headers.get(header::CONTENT_ENCODING) {
        if enc.as_bytes() != b"identity" {
            return Err(ServeError::bad_request(format!(
                "Content-Encoding {:?} is not supported; send the body uncompressed",
                enc
            )));
        }
    }
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        if declared.is_none() {
            too_large()
        } else {
            ServeError::bad_request(format!("could not read the request body: {e}"))
        }
    })
}

fn field<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

fn param<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    field(obj, "parameters")?.as_object()?.get(key)
}

/// A REST request, parsed.
struct Decoded {
    request: Inference,
    inputs: Vec<(String, ferrolite::Tensor)>,
    /// The request's `binary_data_output`: outputs not listed come back binary.
    binary_all: bool,
}

/// Parses the JSON header and binary parts into tensors.
fn decode_request(
    model: Arc<crate::model::ServedModel>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Decoded, ServeError> {
    let (header_bytes, mut binary) = match headers.get(HEADER_LENGTH) {
        Some(v) => {
            let n = v
                .to_str()
                .ok()
                .and_then(|s| s.trim().parse::<usize>().ok())
                .ok_or_else(|| {
                    ServeError::bad_request("Inference-Header-Content-Length is not a number")
                })?;
            if n > body.len() {
                return Err(ServeError::bad_request(format!(
                    "Inference-Header-Content-Length is {n}, but the body has only {} bytes",
                    body.len()
                )));
            }
            body.split_at(n)
        }
        None => (body, &[][..]),
    };
    let root: Value = serde_json::from_slice(header_bytes)
        .map_err(|e| ServeError::bad_request(format!("the request is not valid JSON: {e}")))?;
    let root = root
        .as_object()
        .ok_or_else(|| ServeError::bad_request("the request must be a JSON object"))?;
    let id = match field(root, "id") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(ServeError::bad_request("'id' must be a string")),
        None => String::new(),
    };
    let binary_all = param(root, "binary_data_output")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let inputs_json = field(root, "inputs")
        .and_then(Value::as_array)
        .ok_or_else(|| ServeError::bad_request("the request has no 'inputs' array"))?;
    let mut inputs = Vec::with_capacity(inputs_json.len());
    for (i, input) in inputs_json.iter().enumerate() {
        let obj = input
            .as_object()
            .ok_or_else(|| ServeError::bad_request(format!("inputs[{i}] is not an object")))?;
        let name = field(obj, "name")
            .and_then(Value::as_str)
            .ok_or_else(|| ServeError::bad_request(format!("inputs[{i}] has no 'name'")))?;
        let datatype = field(obj, "datatype")
            .and_then(Value::as_str)
            .ok_or_else(|| ServeError::bad_request(format!("input '{name}' has no 'datatype'")))?;
        let shape = field(obj, "shape")
            .and_then(Value::as_array)
            .ok_or_else(|| ServeError::bad_request(format!("input '{name}' has no 'shape'")))?
            .iter()
            .map(|d| d.as_i64())
            .collect::<Option<Vec<i64>>>()
            .ok_or_else(|| {
                ServeError::bad_request(format!("input '{name}': 'shape' must hold integers"))
            })?;
        let spec = InputSpec::new(name, datatype, &shape)?;
        let tensor = match param(obj, "binary_data_size") {
            Some(size) => {
                let size = size
                    .as_u64()
                    .and_then(|s| usize::try_from(s).ok())
                    .ok_or_else(|| {
                        ServeError::bad_request(format!(
                            "input '{name}': binary_data_size must be a non-negative integer"
                        ))
                    })?;
                if size > binary.len() {
                    return Err(ServeError::bad_request(format!(
                        "input '{name}': binary_data_size is {size}, but only {} binary bytes remain (truncated body?)",
                        binary.len()
                    )));
                }
                let (part, rest) = binary.split_at(size);
                binary = rest;
                spec.from_raw(part)?
            }
            None => {
                let data = field(obj, "data").ok_or_else(|| {
                    ServeError::bad_request(format!(
                        "input '{name}' has neither 'data' nor a binary_data_size parameter"
                    ))
                })?;
                spec.from_json(data)?
            }
        };
        inputs.push((name.to_string(), tensor));
    }
    if !binary.is_empty() {
        return Err(ServeError::bad_request(format!(
            "{} binary bytes follow the inputs that no input's binary_data_size accounts for",
            binary.len()
        )));
    }
    let mut outputs = Vec::new();
    if let Some(list) = field(root, "outputs") {
        let list = list
            .as_array()
            .ok_or_else(|| ServeError::bad_request("'outputs' must be an array"))?;
        for (i, o) in list.iter().enumerate() {
            let obj = o
                .as_object()
                .ok_or_else(|| ServeError::bad_request(format!("outputs[{i}] is not an object")))?;
            let name = field(obj, "name")
                .and_then(Value::as_str)
                .ok_or_else(|| ServeError::bad_request(format!("outputs[{i}] has no 'name'")))?;
            let binary = param(obj, "binary_data")
                .and_then(Value::as_bool)
                .unwrap_or(binary_all);
            outputs.push(RequestedOutput {
                name: name.to_string(),
                binary,
            });
        }
    }
    Ok(Decoded {
        request: Inference { model, id, outputs },
        inputs,
        binary_all,
    })
}

fn encode_response(
    request: &Inference,
    outputs: Vec<(String, ferrolite::Tensor)>,
    binary_all: bool,
) -> Response {
    let mut binary: Vec<u8> = Vec::new();
    let mut any_binary = false;
    let mut list = Vec::with_capacity(outputs.len());
    for (name, tensor) in &outputs {
        let as_binary = request
            .outputs
            .iter()
            .find(|o| o.name == *name)
            .map_or(binary_all, |o| o.binary);
        let mut entry = json!({
            "name": name,
            "datatype": datatype_name(tensor.dtype()).unwrap_or(""),
            "shape": tensor.shape(),
        });
        if as_binary {
            any_binary = true;
            let raw = to_raw(tensor);
            entry["parameters"] = json!({ "binary_data_size": raw.len() });
            binary.extend_from_slice(&raw);
        } else {
            entry["data"] = to_json(tensor);
        }
        list.push(entry);
    }
    let mut root = json!({
        "model_name": request.model.name,
        "model_version": request.model.version,
        "outputs": list,
    });
    if !request.id.is_empty() {
        root["id"] = json!(request.id);
    }
    let header_json = root.to_string();
    if !any_binary {
        return json_response(root);
    }
    let header_len = header_json.len();
    let mut body = header_json.into_bytes();
    body.extend_from_slice(&binary);
    let mut response = (StatusCode::OK, body).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(HEADER_LENGTH, HeaderValue::from(header_len));
    response
}
