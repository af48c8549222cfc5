//! The model repository and each model's pool: a fixed number of sessions, each on its own
//! worker thread, fed by one bounded queue.
//!
//! A request that finds the queue full is refused at once (503 / UNAVAILABLE) instead of
//! waiting: a server that queues without bound only turns overload into timeouts and memory.

use crate::codec::datatype_name;
use crate::error::{ErrorKind, ServeError};
use crate::log;
use crate::metrics::{ModelMetrics, ModelSnapshot};
use ferrolite::{Dim, IoInfo, Session, SessionOptions, Tensor};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::oneshot;

/// How each model is served.
#[derive(Clone, Debug)]
pub struct PoolOptions {
    /// Sessions per model: how many requests run at once.
    pub sessions: usize,
    /// Threads per session.
    pub threads: usize,
    /// Requests that may wait for a session; more are refused.
    pub queue_size: usize,
    /// Forces the CPU ISA (as `--isa` does elsewhere).
    pub isa: Option<String>,
}

/// A run's named outputs, or why it failed.
pub type RunResult = Result<Vec<(String, Tensor)>, ServeError>;

struct Job {
    inputs: Vec<(String, Tensor)>,
    reply: oneshot::Sender<(RunResult, std::time::Duration)>,
}

/// One served model.
pub struct ServedModel {
    pub name: String,
    pub version: String,
    /// `ferrolite_onnx`, `ferrolite_paddle` or `ferrolite_optimized`.
    pub platform: String,
    pub inputs: Vec<IoInfo>,
    pub outputs: Vec<IoInfo>,
    pub metrics: ModelMetrics,
    /// `None` once closed.
    queue: Mutex<Option<SyncSender<Job>>>,
    queue_size: usize,
    waiting: Arc<AtomicUsize>,
    busy: Arc<AtomicUsize>,
    sessions: usize,
    workers: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

/// Finds the model file or folder in a repository folder. Triton's layout, with numbered
/// version folders, is read too: the highest version is served.
fn locate(dir: &Path) -> Result<(PathBuf, String), String> {
    let mut versions: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read the folder: {e}"))?
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| Some((e.file_name().to_str()?.parse::<u64>().ok()?, e.path())))
        .collect();
    versions.sort();
    let (dir, version) = match versions.pop() {
        Some((v, path)) => (path, v.to_string()),
        None => (dir.to_path_buf(), "1".to_string()),
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "onnx" || x == "flm"))
        .collect();
    files.sort();
    match files.len() {
        1 => Ok((files.remove(0), version)),
        // A Paddle model is a folder of files (checked after the single-file formats: a
        // meta.json beside an ONNX file does not make the folder a Paddle model).
        0 if ferrolite::is_paddle(&dir) => Ok((dir, version)),
        0 => Err(format!(
            "{} holds no model (an .onnx or .flm file, or a Paddle model)",
            dir.display()
        )),
        _ => Err(format!(
            "{} holds several models ({}); keep one per folder",
            dir.display(),
            files
                .iter()
                .filter_map(|f| f.file_name()?.to_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

impl ServedModel {
    /// Loads the model in `dir` (named after the folder) and starts its sessions.
    pub fn load(name: &str, dir: &Path, options: &PoolOptions) -> Result<Arc<ServedModel>, String> {
        let (path, version) = locate(dir)?;
        let mut session_options = SessionOptions::default().with_threads(options.threads.max(1));
        // Each session would pin its threads to the same first CPUs; let the OS spread them.
        if options.sessions > 1 {
            session_options = session_options.with_thread_pinning(false);
        }
        if let Some(isa) = &options.isa {
            session_options = session_options.with_isa(isa.clone());
        }
        let started = Instant::now();
        let model = ferrolite::load_path(&path).map_err(|e| e.to_string())?;
        let platform = match model.format {
            ferrolite::Format::Onnx => "ferrolite_onnx",
            ferrolite::Format::Paddle => "ferrolite_paddle",
            ferrolite::Format::Optimized => "ferrolite_optimized",
        }
        .to_string();
        let sessions = options.sessions.max(1);
        let mut loaded = Vec::with_capacity(sessions);
        for _ in 0..sessions {
            loaded.push(
                Session::from_model(model.clone(), session_options.clone())
                    .map_err(|e| e.to_string())?,
            );
        }
        let first = &loaded[0];
        for io in first.inputs().iter().chain(first.outputs()) {
            if datatype_name(io.dtype).is_none() {
                return Err(format!(
                    "tensor '{}' is {}, which the inference protocol has no datatype for",
                    io.name, io.dtype
                ));
            }
        }
        // Plan for the declared shapes now, so the first request does not pay for it.
        for s in &loaded {
            let shapes = s.default_shapes();
            if let Err(e) = s.prerun(&shapes) {
                log::debug(
                    "no plan ahead",
                    &[("model", json!(name)), ("reason", json!(e.to_string()))],
                );
            }
        }
        let (tx, rx) = sync_channel::<Job>(options.queue_size);
        let rx = Arc::new(Mutex::new(rx));
        let waiting = Arc::new(AtomicUsize::new(0));
        let busy = Arc::new(AtomicUsize::new(0));
        let served = ServedModel {
            name: name.to_string(),
            version,
            platform,
            inputs: first.inputs().to_vec(),
            outputs: first.outputs().to_vec(),
            metrics: ModelMetrics::default(),
            queue: Mutex::new(Some(tx)),
            queue_size: options.queue_size,
            waiting: waiting.clone(),
            busy: busy.clone(),
            sessions,
            workers: Mutex::new(Vec::new()),
        };
        let mut workers = Vec::with_capacity(sessions);
        for (i, session) in loaded.into_iter().enumerate() {
            let rx = rx.clone();
            let (waiting, busy) = (waiting.clone(), busy.clone());
            let model_name = name.to_string();
            let handle = std::thread::Builder::new()
                .name(format!("serve-{name}-{i}"))
                .spawn(move || worker(session, &model_name, &rx, &waiting, &busy))
                .map_err(|e| format!("cannot start a session thread: {e}"))?;
            workers.push(handle);
        }
        *served.workers.lock().unwrap_or_else(|p| p.into_inner()) = workers;
        log::info(
            "model loaded",
            &[
                ("model", json!(name)),
                ("version", json!(served.version)),
                ("path", json!(path.display().to_string())),
                ("platform", json!(served.platform)),
                ("sessions", json!(sessions)),
                ("threads_per_session", json!(options.threads.max(1))),
                ("queue_size", json!(options.queue_size)),
                ("load_ms", json!(started.elapsed().as_millis() as u64)),
            ],
        );
        Ok(Arc::new(served))
    }

    /// Queues a run; refuses at once when the queue is full or the model is closing.
    pub fn submit(
        &self,
        inputs: Vec<(String, Tensor)>,
    ) -> Result<oneshot::Receiver<(RunResult, std::time::Duration)>, ServeError> {
        let (reply, receiver) = oneshot::channel();
        let guard = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let Some(queue) = guard.as_ref() else {
            return Err(ServeError::new(
                ErrorKind::Unavailable,
                "the server is shutting down",
            ));
        };
        // Count first: the worker may take the job before try_send returns.
        self.waiting.fetch_add(1, Ordering::AcqRel);
        match queue.try_send(Job { inputs, reply }) {
            Ok(()) => Ok(receiver),
            Err(e) => {
                self.waiting.fetch_sub(1, Ordering::AcqRel);
                let message = match e {
                    TrySendError::Full(_) => format!(
                        "model '{}': all {} sessions are busy and the queue of {} is full; retry later",
                        self.name, self.sessions, self.queue_size
                    ),
                    TrySendError::Disconnected(_) => "the server is shutting down".to_string(),
                };
                Err(ServeError::new(ErrorKind::Unavailable, message))
            }
        }
    }

    /// Closes the queue and waits for the sessions to finish what they hold.
    pub fn close(&self) {
        drop(self.queue.lock().unwrap_or_else(|p| p.into_inner()).take());
        let workers = std::mem::take(&mut *self.workers.lock().unwrap_or_else(|p| p.into_inner()));
        for w in workers {
            let _ = w.join();
        }
    }

    pub fn snapshot(&self) -> ModelSnapshot<'_> {
        ModelSnapshot {
            name: &self.name,
            metrics: &self.metrics,
            queue_depth: self.waiting.load(Ordering::Acquire),
            queue_capacity: self.queue_size,
            sessions: self.sessions,
            busy_sessions: self.busy.load(Ordering::Acquire),
        }
    }

    /// Whether `version` names this model's version ("" means the served one).
    pub fn has_version(&self, version: &str) -> bool {
        version.is_empty() || version == self.version
    }
}

/// A session's thread: takes jobs until the queue closes.
fn worker(
    session: Session,
    model: &str,
    queue: &Mutex<Receiver<Job>>,
    waiting: &AtomicUsize,
    busy: &AtomicUsize,
) {
    loop {
        let job = {
            let rx = queue.lock().unwrap_or_else(|p| p.into_inner());
            match rx.recv() {
                Ok(job) => job,
                Err(_) => return,
            }
        };
        waiting.fetch_sub(1, Ordering::AcqRel);
        // A client that went away no longer needs its run.
        if job.reply.is_closed() {
            continue;
        }
        busy.fetch_add(1, Ordering::AcqRel);
        let started = Instant::now();
        let refs: Vec<(&str, &Tensor)> = job.inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
        // A panic in the engine is a bug, but one request's bug must not take the server down.
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| session.run_refs(&refs)));
        let result = match result {
            Ok(Ok(outputs)) => Ok(outputs.into_vec()),
            Ok(Err(e)) => Err(ServeError::from_engine(model, e)),
            Err(_) => Err(ServeError::new(
                ErrorKind::Internal,
                format!("model '{model}': the engine panicked on this request"),
            )),
        };
        let elapsed = started.elapsed();
        busy.fetch_sub(1, Ordering::AcqRel);
        let _ = job.reply.send((result, elapsed));
    }
}

/// Every model of a repository, by name.
pub struct Repository {
    pub models: Vec<Arc<ServedModel>>,
}

impl Repository {
    /// Loads every model folder in `dir`. Any model that fails to load fails the whole start,
    /// with every failure listed: a server that comes up without some of its models is worse
    /// than one that does not come up.
    pub fn load(dir: &Path, options: &PoolOptions) -> Result<Repository, String> {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| format!("model repository {}: {e}", dir.display()))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        entries.sort();
        let mut models = Vec::new();
        let mut failures = Vec::new();
        for path in entries {
            let Some(name) = path
                .file_name()
                .and_then(|n| n.to_str())
                .map(str::to_string)
            else {
                failures.push(format!("{}: the folder name is not UTF-8", path.display()));
                continue;
            };
            if name.starts_with('.') {
                continue;
            }
            match ServedModel::load(&name, &path, options) {
                Ok(m) => models.push(m),
                Err(e) => failures.push(format!("model '{name}': {e}")),
            }
        }
        if !failures.is_empty() {
            for m in &models {
                m.close();
            }
            return Err(format!(
                "{} model(s) in {} failed to load:\n  {}",
                failures.len(),
                dir.display(),
                failures.join("\n  ")
            ));
        }
        if models.is_empty() {
            return Err(format!(
                "model repository {} holds no model folders (one folder per model)",
                dir.display()
            ));
        }
        Ok(Repository { models })
    }

    /// The model named, at the version asked ("" for the served one).
    pub fn get(&self, name: &str, version: &str) -> Result<&Arc<ServedModel>, ServeError> {
        let model = self
            .models
            .iter()
            .find(|m| m.name == name)
            .ok_or_else(|| ServeError::not_found(format!("unknown model '{name}'")))?;
        if !model.has_version(version) {
            return Err(ServeError::not_found(format!(
                "model '{name}' has no version '{version}' (serving version {})",
                model.version
            )));
        }
        Ok(model)
    }

    pub fn close(&self) {
        for m in &self.models {
            m.close();
        }
    }
}

/// Declared dims for metadata: symbolic dims (and unknown shapes) are -1.
pub fn metadata_shape(io: &IoInfo) -> Vec<i64> {
    match &io.shape {
        Some(dims) => dims
            .iter()
            .map(|d| match d {
                Dim::Fixed(n) => i64::try_from(*n).unwrap_or(-1),
                Dim::Symbolic(_) => -1,
            })
            .collect(),
        None => vec![-1],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ferrolite-serve-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_model_folder_holds_one_model_or_numbered_versions() {
        let d = scratch("locate");
        assert!(locate(&d).unwrap_err().contains("holds no model"));
        std::fs::write(d.join("model.onnx"), b"x").unwrap();
        assert_eq!(locate(&d).unwrap(), (d.join("model.onnx"), "1".to_string()));
        std::fs::write(d.join("other.onnx"), b"x").unwrap();
        assert!(locate(&d).unwrap_err().contains("several models"));
        // Triton's layout: the highest numbered folder is served.
        for v in ["1", "3", "20"] {
            std::fs::create_dir_all(d.join(v)).unwrap();
            std::fs::write(d.join(v).join("model.onnx"), b"x").unwrap();
        }
        assert_eq!(
            locate(&d).unwrap(),
            (d.join("20").join("model.onnx"), "20".to_string())
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_repository_lists_every_model_that_fails() {
        let d = scratch("repo");
        assert!(Repository::load(&d, &options())
            .err()
            .unwrap()
            .contains("holds no model folders"));
        for bad in ["a", "b"] {
            std::fs::create_dir_all(d.join(bad)).unwrap();
            std::fs::write(d.join(bad).join("model.onnx"), b"not a model").unwrap();
        }
        let e = Repository::load(&d, &options()).err().unwrap();
        assert!(
            e.contains("2 model(s)") && e.contains("model 'a'") && e.contains("model 'b'"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    fn options() -> PoolOptions {
        PoolOptions {
            sessions: 1,
            threads: 1,
            queue_size: 1,
            isa: None,
        }
    }

    /// The shipped ppocr classifier: served, queued, refused when full, closed.
    #[test]
    fn a_full_queue_refuses_and_a_closed_model_finishes_its_work() {
        let shipped =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/ppocr_cls/model.onnx");
        let model_dir = scratch("cls");
        std::fs::copy(shipped, model_dir.join("model.onnx")).unwrap();
        let served = ServedModel::load(
            "cls",
            &model_dir,
            &PoolOptions {
                queue_size: 0,
                ..options()
            },
        )
        .unwrap();
        assert_eq!(served.platform, "ferrolite_onnx");
        assert_eq!(metadata_shape(&served.inputs[0]).len(), 4);
        let x = Tensor::zeros(ferrolite::DType::F32, &[1, 3, 48, 192]).unwrap();
        // Queue of 0: a job is taken only by an idle session; the session is busy with the
        // first long enough for some of 50 more to be refused.
        let mut accepted = Vec::new();
        // The session's thread may not wait on the queue yet.
        for _ in 0..1000 {
            if let Ok(r) = served.submit(vec![("x".into(), x.clone())]) {
                accepted.push(r);
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let mut refused = 0;
        for _ in 0..50 {
            match served.submit(vec![("x".into(), x.clone())]) {
                Ok(r) => accepted.push(r),
                Err(e) => {
                    assert_eq!(e.kind, ErrorKind::Unavailable);
                    assert!(e.message.contains("queue"), "{}", e.message);
                    refused += 1;
                }
            }
        }
        assert!(
            !accepted.is_empty() && refused > 0,
            "{} accepted, {refused} refused",
            accepted.len()
        );
        for r in accepted {
            let (result, _) = r.blocking_recv().unwrap();
            assert_eq!(result.unwrap()[0].1.shape(), &[1, 2]);
        }
        served.close();
        let e = served.submit(vec![("x".into(), x)]).unwrap_err();
        assert!(e.message.contains("shutting down"));
        let _ = std::fs::remove_dir_all(&model_dir);
    }
}
