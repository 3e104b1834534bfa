//! Progress events (optional; docs/front-ends/events.md), from step 6 of a job (the spine:
//! [`crate::job`]) to its last, step 11: while a job runs, jobenv POSTs its
//! status changes and its redacted output lines as JSON to the node's `EVENTS_URL`, in jobenv's
//! own format ([`envelope`]) or as DD-0012 notifications of the row the payload names
//! ([`dd0012`]); [`wire::encode`] is the one place that tells them apart. Only
//! redacted bytes become events; a push never waits (lines beyond the budget are dropped and
//! counted, statuses never are); at exit jobenv waits at most [`FINAL_WAIT`] for the final
//! status. Without `EVENTS_URL` nothing of this exists. This module takes plain data (a
//! [`Target`], [`Ids`], the ready pipe) and depends on nothing else of jobenv.
//!
//! **When `running` starts.** With events on, the program is run as
//! `printf x 2>/dev/null >&3; exec <EXECUTABLE> 3>&-`, fd 3 being the write end of a pipe whose
//! read end comes here ([`Events::watch_ready`]): the byte arrives when the dev shell is entered
//! and the program is about to be exec'd, and the program itself never sees fd 3. Lines read
//! before it are `preparing`, after it `running`.

pub mod dd0012;
pub mod envelope;
pub mod lines;
pub mod model;
mod sender;
pub mod wire;

use std::fs::File;
use std::io::Read;
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::{Duration, Instant, SystemTime};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use reqwest::Url;
pub use safe_io::secret::{Hidden, Secret};

pub use model::{End, Level, Progress};
pub use wire::Wire;

use lines::LineSplitter;
use model::{Item, Line};

/// How long jobenv waits, after the job ended, for the final status to be delivered.
pub const FINAL_WAIT: Duration = Duration::from_secs(2);
/// The budget of lines pushed but not yet sent (or given up): beyond it, lines are dropped.
pub const QUEUE_LINES: usize = 4096;
pub const QUEUE_BYTES: usize = 1 << 20;

/// Where events go, and in which format: for DD-0012, the row's own address. The URL is not
/// shown either: it may carry credentials.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: Hidden<Url>,
    pub secret: Secret,
    pub wire: Wire,
}

/// What every event of a job names (jobenv's format; DD-0012's address names the row instead).
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct Ids {
    /// The job's namespace (`NAMESPACE`, or the last segment of `TF_HTTP_ADDRESS`).
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9-]{0,62}$"))]
    pub deployment: String,
    /// `BUILD_ID`, else the job id, else `null`.
    pub build: Option<String>,
    /// The verb jobenv was started with.
    pub verb: String,
}

/// What the pumps and the job send to the sender thread, in the order things happened.
#[derive(Debug)]
enum Msg {
    Lines(Vec<Line>),
    /// A status or the end, and when it was pushed.
    Status(Item, Instant),
}

/// The events of one job; cheap to clone, and every method is a no-op when events are off.
#[derive(Clone, Default)]
pub struct Events(Option<Arc<Shared>>);

struct Shared {
    tx: tokio::sync::mpsc::UnboundedSender<Msg>,
    /// Taken for a moment by every push and by the sender.
    state: Mutex<State>,
    /// The ready pipe, read by whoever looks first (a pump, or the watcher thread).
    ready: Mutex<Option<File>>,
    /// The sender's last word: whether the final status was delivered.
    done: Mutex<Option<mpsc::Receiver<bool>>>,
}

/// Lines and bytes pushed and not yet sent or given up (the budget); the running total of lines
/// lost; status events pushed and delivered; `closed` once the terminal status was pushed or the
/// receiver refused jobenv; why the last attempt failed (never the URL or the secret); and
/// whether a line about delivery trouble was already written.
#[derive(Default)]
struct State {
    queued_lines: usize,
    queued_bytes: usize,
    dropped: u64,
    statuses: u64,
    delivered: u64,
    closed: bool,
    running: bool,
    last_error: Option<String>,
    reported: bool,
}

impl Events {
    /// Starts the events of a job: records `preparing` and starts the sender; returns at once.
    pub fn start(target: &Target, ids: Ids) -> Self {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let (done_tx, done_rx) = mpsc::sync_channel(1);
        let shared = Arc::new(Shared {
            tx,
            state: Mutex::default(),
            ready: Mutex::new(None),
            done: Mutex::new(Some(done_rx)),
        });
        shared.status(Item::Status {
            status: Progress::Preparing,
            at: SystemTime::now(),
        });
        sender::spawn(Arc::clone(&shared), target.clone(), ids, rx, done_tx);
        Events(Some(shared))
    }

    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// The read end of the program's ready pipe: `running` is reported when its byte arrives.
    /// A thread waits for it; the pumps also look before every read they pass on.
    pub fn watch_ready(&self, pipe: File) {
        let Some(shared) = &self.0 else { return };
        let watched = pipe.try_clone();
        *lock(&shared.ready) = Some(pipe);
        let (Ok(watched), shared) = (watched, Arc::clone(shared)) else {
            return;
        };
        let _ = std::thread::Builder::new().name("events-ready".into()).spawn(move || {
            let mut fds = [PollFd::new(watched.as_fd(), PollFlags::POLLIN)];
            while lock(&shared.ready).is_some() {
                let _ = poll(&mut fds, PollTimeout::NONE);
                shared.check_ready();
            }
        });
    }

    /// A tap for one output stream of the program: give it the redacted bytes as they come.
    pub fn tap(&self, level: Level) -> Option<Tap> {
        let shared = Arc::clone(self.0.as_ref()?);
        Some(Tap {
            shared,
            level,
            splitter: LineSplitter::default(),
            lines: Vec::new(),
        })
    }

    /// The job ended: its terminal status, how each format says the end (with jobenv's exit
    /// code), and jobenv's own error lines (sent at level `error`; they never hold a value).
    pub fn finish(&self, (status, end): (Progress, End), errors: &[String]) {
        let Some(shared) = &self.0 else { return };
        shared.check_ready();
        shared.push_lines(
            Level::Error,
            errors.iter().map(|e| lines::capped(e.clone(), false)).collect(),
        );
        shared.status(Item::End {
            status,
            end,
            at: SystemTime::now(),
        });
    }

    /// Waits at most [`FINAL_WAIT`] for the final status to be delivered; if it was not, one
    /// line says what was not (unless a line about the receiver was already written).
    pub fn wait(&self) {
        let Some(shared) = &self.0 else { return };
        let Some(done) = lock(&shared.done).take() else { return };
        let delivered = done.recv_timeout(FINAL_WAIT).unwrap_or(false);
        let state = lock(&shared.state);
        if !delivered && !state.reported {
            let (statuses, lines) = (
                state.statuses - state.delivered,
                state.queued_lines as u64 + state.dropped,
            );
            let why = state
                .last_error
                .clone()
                .unwrap_or_else(|| format!("no answer from the receiver within {}s", FINAL_WAIT.as_secs()));
            tracing::warn!(
                "progress events: the final status was not delivered ({why}); undelivered: {statuses} status event(s), {lines} log line(s)"
            );
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic elsewhere must not take delivery (or the exit) down with it.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// A status (`Item::Status`) or the end (`Item::End`).
    fn status(&self, item: Item) {
        let mut state = lock(&self.state);
        if state.closed {
            return;
        }
        state.closed = item.is_end();
        state.running |= matches!(
            item,
            Item::Status {
                status: Progress::Running,
                ..
            }
        );
        state.statuses += 1;
        // Sent under the lock: no line labelled `running` can overtake the `running` status.
        let _ = self.tx.send(Msg::Status(item, Instant::now()));
    }

    /// How many more lines the budget takes now.
    fn room(&self) -> usize {
        let state = lock(&self.state);
        if state.closed {
            0
        } else {
            QUEUE_LINES.saturating_sub(state.queued_lines)
        }
    }

    /// Queues lines within the budget; the rest are dropped and counted. Never waits.
    fn push_lines(&self, level: Level, texts: Vec<String>) {
        let mut state = lock(&self.state);
        if texts.is_empty() || state.closed {
            return;
        }
        let source_status = if state.running {
            Progress::Running
        } else {
            Progress::Preparing
        };
        let at = SystemTime::now();
        let mut kept = Vec::with_capacity(texts.len());
        for line in texts {
            if state.queued_lines < QUEUE_LINES && state.queued_bytes + line.len() <= QUEUE_BYTES {
                state.queued_lines += 1;
                state.queued_bytes += line.len();
                kept.push(Line {
                    level,
                    line,
                    source_status,
                    at,
                });
            } else {
                state.dropped += 1;
            }
        }
        if !kept.is_empty() {
            let _ = self.tx.send(Msg::Lines(kept));
        }
    }

    /// Reports `running` once the ready pipe has its byte. Never waits; called before every
    /// push of program output, so lines the program wrote are never labelled `preparing`.
    fn check_ready(&self) {
        let mut ready = lock(&self.ready);
        let Some(pipe) = ready.as_mut() else { return };
        let mut fds = [PollFd::new(pipe.as_fd(), PollFlags::POLLIN)];
        if !matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0) {
            return;
        }
        let mut byte = [0u8; 1];
        match pipe.read(&mut byte) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return,
            // The byte: the program is being exec'd. End of file: it never was.
            Ok(1) => self.status(Item::Status {
                status: Progress::Running,
                at: SystemTime::now(),
            }),
            _ => {}
        }
        *ready = None;
    }
}

/// Turns one stream's redacted output into event lines. Used by that stream's pump thread.
pub struct Tap {
    shared: Arc<Shared>,
    level: Level,
    splitter: LineSplitter,
    lines: Vec<String>,
}

impl Tap {
    pub fn push(&mut self, redacted: &[u8]) {
        // First, so lines read after the program's exec are labelled `running`.
        self.shared.check_ready();
        // Lines beyond the budget are counted without being made into text: a slow receiver
        // must not make every line cost an allocation.
        let room = self.shared.room();
        let dropped = self.splitter.push(redacted, &mut self.lines, room);
        self.flush(dropped);
    }

    /// End of the stream: the unfinished last line goes too.
    pub fn finish(&mut self) {
        let dropped = self.splitter.finish(&mut self.lines);
        self.flush(dropped);
    }

    fn flush(&mut self, dropped: u64) {
        if dropped > 0 {
            lock(&self.shared.state).dropped += dropped;
        }
        if !self.lines.is_empty() {
            self.shared.push_lines(self.level, std::mem::take(&mut self.lines));
        }
    }
}
