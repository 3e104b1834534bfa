//! The outbox of one job's events: what the pumps and the main thread put in, what the sender
//! takes out, and everything jobenv knows about delivery. A plain state machine behind one
//! mutex, so its rules are unit-tested without threads or a network.
//!
//! - Log lines are bounded ([`QUEUE_LINES`], [`QUEUE_BYTES`]): a push never waits; when full,
//!   the oldest lines go and are counted in `dropped`.
//! - Status changes are never dropped. Each remembers how many lines came before it, so the
//!   sender sends those lines first and receivers see events in the order things happened.
//! - Lines go out in batches of at most [`BATCH_LINES`] lines and [`BATCH_BYTES`] bytes, once a
//!   batch is full or its oldest line has waited [`BATCH_DELAY`] (at once when a status waits),
//!   and at least [`BATCH_INTERVAL`] apart: under a burst of output a fast receiver would
//!   otherwise keep the sender busy posting, taking CPU from the program.
//! - After the terminal status, new lines are ignored. If lines still stand before it
//!   [`HURRY_AFTER`] later (a slow receiver), they are dropped, counted, so the final status
//!   gets its turn within jobenv's last wait.

use std::collections::VecDeque;
use std::time::{Duration, Instant, SystemTime};

use super::lines::Block;
use super::model::{Item, Level, Line, Status, StatusChange};

pub const QUEUE_LINES: usize = 4096;
pub const QUEUE_BYTES: usize = 1 << 20;
pub const BATCH_LINES: usize = 64;
pub const BATCH_BYTES: usize = 64 * 1024;
pub const BATCH_DELAY: Duration = Duration::from_millis(200);
/// At most 40 batches a second: about 2,500 lines a second reach a receiver, the rest of a
/// burst is dropped (oldest first) and counted.
pub const BATCH_INTERVAL: Duration = Duration::from_millis(25);
pub const HURRY_AFTER: Duration = Duration::from_secs(1);

/// What the sender should do next.
#[derive(Debug)]
pub enum Next {
    /// Send this item; `dropped` is the running total of lost lines to report with it.
    Send { item: Item, dropped: u64 },
    /// Nothing due before this moment (unless something is pushed).
    WaitUntil(Instant),
    /// Nothing to do until something is pushed.
    Wait,
    /// The terminal status is out (or given up): the sender is done.
    Done,
}

/// How the sender's attempt with an item ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    Delivered,
    /// Given up (retries exhausted, or refused for good): its lines count as dropped.
    Abandoned,
}

struct Pending {
    change: StatusChange,
    /// Lines pushed before this change (a position in the stream of all lines ever pushed).
    lines_before: u64,
}

#[derive(Debug, Clone, Copy)]
struct InFlight {
    lines: usize,
    terminal: bool,
    status: bool,
}

/// The lines of one read, as pushed, and how many of them are gone from the front.
struct Queued {
    level: Level,
    source_status: Status,
    at: SystemTime,
    since: Instant,
    block: Block,
    /// The first line still waiting.
    next: usize,
}

impl Queued {
    fn waiting(&self) -> usize {
        self.block.len() - self.next
    }
}

pub struct Queue {
    blocks: VecDeque<Queued>,
    /// Lines waiting, and the bytes of their text.
    count: usize,
    bytes: usize,
    /// Lines ever pushed; the first waiting line is line number `pushed - count`.
    pushed: u64,
    dropped: u64,
    statuses: VecDeque<Pending>,
    /// When the last ordinary batch was taken (for [`BATCH_INTERVAL`]).
    last_batch: Option<Instant>,
    current: Status,
    /// When the terminal status was pushed: nothing is accepted after it.
    closed_at: Option<Instant>,
    in_flight: Option<InFlight>,
    /// The terminal status was delivered.
    pub final_delivered: bool,
    /// Status events given up (the receiver refused them for good).
    pub statuses_abandoned: u64,
    /// The sender stopped: everything that will ever be delivered has been.
    pub sender_done: bool,
    /// A line about delivery trouble was already written: the last summary is not needed.
    pub reported: bool,
    /// Why the last attempt failed, in words that never hold the URL or the secret.
    pub last_error: Option<String>,
}

impl Queue {
    /// A job's queue starts in `preparing`, with that status waiting to go.
    pub fn new(at: SystemTime) -> Self {
        let mut queue = Queue {
            blocks: VecDeque::new(),
            count: 0,
            bytes: 0,
            pushed: 0,
            dropped: 0,
            statuses: VecDeque::new(),
            last_batch: None,
            current: Status::Preparing,
            closed_at: None,
            in_flight: None,
            final_delivered: false,
            statuses_abandoned: 0,
            sender_done: false,
            reported: false,
            last_error: None,
        };
        queue.statuses.push_back(Pending { change: StatusChange { status: Status::Preparing, exit_code: None, at }, lines_before: 0 });
        queue
    }

    /// Adds the lines of one read; never blocks, drops the oldest lines when full.
    pub fn push_block(&mut self, level: Level, block: Block, at: SystemTime, since: Instant) {
        if self.closed_at.is_some() || block.is_empty() {
            return;
        }
        self.count += block.len();
        self.bytes += block.bytes_of(0, block.len());
        self.pushed += block.len() as u64;
        self.blocks.push_back(Queued { level, source_status: self.current, at, since, block, next: 0 });
        let excess = self.count.saturating_sub(QUEUE_LINES);
        self.drop_oldest(excess);
        while self.bytes > QUEUE_BYTES {
            self.drop_oldest(1);
        }
    }

    /// Adds whole lines (jobenv's own), as one read.
    pub fn push_lines(&mut self, level: Level, texts: impl IntoIterator<Item = String>, at: SystemTime, since: Instant) {
        let mut block = Block::default();
        for text in texts {
            block.push_line(&text);
        }
        self.push_block(level, block, at, since);
    }

    /// Drops the `n` oldest waiting lines, counted as dropped.
    fn drop_oldest(&mut self, n: usize) {
        self.dropped += n as u64;
        self.discard(n);
    }

    /// Removes the `n` oldest waiting lines (whole blocks at once where possible).
    fn discard(&mut self, mut n: usize) {
        while n > 0 {
            let Some(front) = self.blocks.front_mut() else { break };
            let take = n.min(front.waiting());
            self.bytes -= front.block.bytes_of(front.next, front.next + take);
            front.next += take;
            self.count -= take;
            n -= take;
            if front.waiting() == 0 {
                self.blocks.pop_front();
            }
        }
    }

    /// Records a status change. Ignored after the terminal status, and when nothing changes.
    pub fn push_status(&mut self, status: Status, exit_code: Option<i32>, at: SystemTime, now: Instant) -> bool {
        if self.closed_at.is_some() || (status == self.current && !status.is_terminal()) {
            return false;
        }
        self.statuses.push_back(Pending { change: StatusChange { status, exit_code, at }, lines_before: self.pushed });
        self.current = status;
        if status.is_terminal() {
            self.closed_at = Some(now);
        }
        true
    }

    /// Decides the next item for the sender and marks it in flight.
    pub fn next(&mut self, now: Instant) -> Next {
        debug_assert!(self.in_flight.is_none(), "one item at a time");
        if self.sender_done {
            return Next::Done;
        }
        if let Some(pending) = self.statuses.front() {
            let front = self.pushed - self.count as u64;
            let before = pending.lines_before.saturating_sub(front) as usize;
            if before > 0 && self.closed_at.is_some_and(|closed| now.duration_since(closed) >= HURRY_AFTER) {
                self.drop_oldest(before);
            } else if before > 0 {
                return self.send_batch(before);
            }
            let pending = self.statuses.pop_front().expect("a status is pending");
            let terminal = pending.change.status.is_terminal();
            self.in_flight = Some(InFlight { lines: 0, terminal, status: true });
            return Next::Send { item: Item::Status(pending.change), dropped: self.dropped };
        }
        let Some(oldest) = self.blocks.front() else {
            return if self.closed_at.is_some() { Next::Done } else { Next::Wait };
        };
        let full = self.count >= BATCH_LINES || self.bytes >= BATCH_BYTES;
        let due = if full { now } else { oldest.since + BATCH_DELAY };
        let due = self.last_batch.map_or(due, |last| due.max(last + BATCH_INTERVAL));
        if now >= due {
            self.last_batch = Some(now);
            return self.send_batch(self.count);
        }
        Next::WaitUntil(due)
    }

    /// Up to `limit` of the oldest lines, within the batch bounds (at least one line). Only
    /// here does a line become a string.
    fn send_batch(&mut self, limit: usize) -> Next {
        let mut batch: Vec<Line> = Vec::new();
        let mut size = 0;
        'blocks: for queued in &self.blocks {
            for i in queued.next..queued.block.len() {
                let len = queued.block.line_len(i);
                if batch.len() == limit.min(BATCH_LINES) || (!batch.is_empty() && size + len > BATCH_BYTES) {
                    break 'blocks;
                }
                size += len;
                batch.push(Line {
                    level: queued.level,
                    line: queued.block.line(i),
                    source_status: queued.source_status,
                    at: queued.at,
                    since: queued.since,
                });
            }
        }
        self.discard(batch.len());
        self.in_flight = Some(InFlight { lines: batch.len(), terminal: false, status: false });
        Next::Send { item: Item::Logs(batch), dropped: self.dropped }
    }

    /// The sender is done with the item in flight.
    pub fn settle(&mut self, settled: Settled) {
        let Some(item) = self.in_flight.take() else { return };
        match settled {
            Settled::Delivered => self.final_delivered |= item.terminal,
            Settled::Abandoned if item.status => self.statuses_abandoned += 1,
            Settled::Abandoned => self.dropped += item.lines as u64,
        }
        if item.terminal {
            // Nothing follows the terminal status.
            self.sender_done = true;
        }
    }

    /// The receiver refused jobenv: nothing more is sent, and nothing more accepted.
    pub fn stop(&mut self, now: Instant) {
        self.in_flight = None;
        self.closed_at.get_or_insert(now);
        self.sender_done = true;
    }

    /// Status events and log lines not delivered (so far): waiting, in flight, or given up.
    pub fn undelivered(&self) -> (u64, u64) {
        let in_flight = self.in_flight.map_or((0, 0), |i| (u64::from(i.status), i.lines as u64));
        let statuses = self.statuses.len() as u64 + in_flight.0 + self.statuses_abandoned;
        let lines = self.count as u64 + in_flight.1 + self.dropped;
        (statuses, lines)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    }

    fn push(q: &mut Queue, lines: Vec<String>, since: Instant) {
        q.push_lines(Level::Info, lines, SystemTime::now(), since);
    }

    fn status(q: &mut Queue, status: Status, now: Instant) {
        q.push_status(status, status.is_terminal().then_some(0), SystemTime::now(), now);
    }

    /// Takes the next item and delivers it; returns a short description.
    fn take(q: &mut Queue, now: Instant) -> String {
        match q.next(now) {
            Next::Send { item, dropped } => {
                q.settle(Settled::Delivered);
                match item {
                    Item::Status(c) => format!("{:?} d{dropped}", c.status),
                    Item::Logs(lines) => {
                        let first = &lines[0];
                        format!("{}x{} {:?} d{dropped}", first.line, lines.len(), first.source_status)
                    }
                }
            }
            Next::WaitUntil(_) => "wait-until".into(),
            Next::Wait => "wait".into(),
            Next::Done => "done".into(),
        }
    }

    #[test]
    fn events_come_out_in_the_order_things_happened() {
        let t = Instant::now();
        let mut q = Queue::new(SystemTime::now());
        push(&mut q, texts("nix", 2), t);
        status(&mut q, Status::Running, t);
        push(&mut q, texts("out", 3), t);
        status(&mut q, Status::Succeeded, t);
        let later = t + Duration::from_millis(10);
        assert_eq!(take(&mut q, later), "Preparing d0");
        assert_eq!(take(&mut q, later), "nix0x2 Preparing d0");
        assert_eq!(take(&mut q, later), "Running d0");
        assert_eq!(take(&mut q, later), "out0x3 Running d0");
        assert_eq!(take(&mut q, later), "Succeeded d0");
        assert!(q.final_delivered);
        assert_eq!(take(&mut q, later), "done");
        assert_eq!(q.undelivered(), (0, 0));
    }

    #[test]
    fn lines_wait_for_a_full_batch_or_the_delay() {
        let t = Instant::now();
        let mut q = Queue::new(SystemTime::now());
        assert_eq!(take(&mut q, t), "Preparing d0");
        push(&mut q, texts("a", 3), t);
        assert!(matches!(q.next(t), Next::WaitUntil(due) if due == t + BATCH_DELAY));
        assert_eq!(take(&mut q, t + BATCH_DELAY), "a0x3 Preparing d0");
        let t = t + BATCH_DELAY + BATCH_INTERVAL;
        push(&mut q, texts("b", BATCH_LINES + 5), t);
        assert_eq!(take(&mut q, t), format!("b0x{BATCH_LINES} Preparing d0"), "a full batch goes at once");
        assert_eq!(take(&mut q, t + BATCH_INTERVAL), "wait-until", "the rest waits for the delay");
        assert!(matches!(q.next(t + BATCH_DELAY), Next::Send { .. }));
    }

    #[test]
    fn a_batch_spans_reads_and_keeps_each_lines_level_and_status() {
        let t = Instant::now();
        let mut q = Queue::new(SystemTime::now());
        assert_eq!(take(&mut q, t), "Preparing d0");
        push(&mut q, texts("a", 30), t);
        q.push_lines(Level::Warning, texts("b", 30), SystemTime::now(), t);
        status(&mut q, Status::Running, t);
        push(&mut q, texts("c", 30), t);
        match q.next(t) {
            Next::Send { item: Item::Logs(lines), .. } => {
                let seen: Vec<String> = lines.iter().map(|l| format!("{} {:?} {:?}", l.line, l.level, l.source_status)).collect();
                assert_eq!(seen.len(), 60, "only the lines before `running` go before it");
                assert_eq!(seen[0], "a0 Info Preparing");
                assert_eq!(seen[59], "b29 Warning Preparing");
            }
            other => panic!("{other:?}"),
        }
        q.settle(Settled::Delivered);
        assert_eq!(take(&mut q, t), "Running d0");
        assert_eq!(take(&mut q, t + BATCH_DELAY), "c0x30 Running d0");
        assert_eq!((q.count, q.bytes, q.blocks.len()), (0, 0, 0));
    }

    #[test]
    fn full_batches_are_paced_but_lines_before_a_status_are_not() {
        let t = Instant::now();
        let mut q = Queue::new(SystemTime::now());
        assert_eq!(take(&mut q, t), "Preparing d0");
        push(&mut q, texts("a", BATCH_LINES * 3), t);
        assert_eq!(take(&mut q, t), format!("a0x{BATCH_LINES} Preparing d0"));
        assert!(matches!(q.next(t), Next::WaitUntil(due) if due == t + BATCH_INTERVAL));
        assert_eq!(take(&mut q, t + BATCH_INTERVAL), format!("a{BATCH_LINES}x{BATCH_LINES} Preparing d0"));
        status(&mut q, Status::Running, t);
        let soon = t + BATCH_INTERVAL + Duration::from_millis(1);
        assert_eq!(take(&mut q, soon), format!("a{}x{BATCH_LINES} Preparing d0", BATCH_LINES * 2), "a status waits for no pace");
        assert_eq!(take(&mut q, soon), "Running d0");
    }

    #[test]
    fn batches_are_bounded_in_bytes() {
        let t = Instant::now();
        let mut q = Queue::new(SystemTime::now());
        assert_eq!(take(&mut q, t), "Preparing d0");
        push(&mut q, (0..40).map(|_| "x".repeat(4000)).collect(), t);
        match q.next(t) {
            Next::Send { item: Item::Logs(lines), .. } => assert_eq!(lines.len(), BATCH_BYTES / 4000),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_full_queue_drops_the_oldest_lines_and_counts_them() {
        let t = Instant::now();
        let mut q = Queue::new(SystemTime::now());
        push(&mut q, texts("l", QUEUE_LINES + 10), t);
        assert_eq!(take(&mut q, t), "Preparing d10", "the status reports the drop");
        assert_eq!(take(&mut q, t), format!("l10x{BATCH_LINES} Preparing d10"));
        // The byte bound too.
        let mut q = Queue::new(SystemTime::now());
        push(&mut q, (0..300).map(|_| "y".repeat(4096)).collect(), t);
        assert!(q.bytes <= QUEUE_BYTES);
        assert_eq!(q.dropped, 300 - (QUEUE_BYTES / 4096) as u64);
    }

    #[test]
    fn status_changes_are_never_dropped() {
        let t = Instant::now();
        let mut q = Queue::new(SystemTime::now());
        push(&mut q, texts("a", 10), t);
        status(&mut q, Status::Running, t);
        push(&mut q, texts("b", QUEUE_LINES * 2), t);
        status(&mut q, Status::Failed, t);
        assert_eq!(take(&mut q, t), format!("Preparing d{}", 10 + QUEUE_LINES));
        assert_eq!(take(&mut q, t), format!("Running d{}", 10 + QUEUE_LINES), "its lines were dropped, the status was not");
        assert_eq!(take(&mut q, t), format!("b{}x{BATCH_LINES} Running d{}", QUEUE_LINES, 10 + QUEUE_LINES));
    }

    #[test]
    fn nothing_is_accepted_after_the_terminal_status() {
        let t = Instant::now();
        let mut q = Queue::new(SystemTime::now());
        status(&mut q, Status::Canceled, t);
        assert!(!q.push_status(Status::Running, None, SystemTime::now(), t));
        push(&mut q, texts("late", 3), t);
        assert_eq!(take(&mut q, t), "Preparing d0");
        assert_eq!(take(&mut q, t), "Canceled d0");
        assert_eq!(take(&mut q, t), "done");
    }

    #[test]
    fn when_time_runs_out_the_lines_before_the_final_status_are_dropped() {
        let t = Instant::now();
        let mut q = Queue::new(SystemTime::now());
        assert_eq!(take(&mut q, t), "Preparing d0");
        push(&mut q, texts("a", 200), t);
        status(&mut q, Status::Succeeded, t);
        assert_eq!(take(&mut q, t), "a0x64 Preparing d0");
        assert_eq!(take(&mut q, t + HURRY_AFTER), "Succeeded d136");
        assert!(q.final_delivered);
    }

    #[test]
    fn abandoned_items_are_counted() {
        let t = Instant::now();
        let mut q = Queue::new(SystemTime::now());
        push(&mut q, texts("a", 5), t);
        assert!(matches!(q.next(t), Next::Send { item: Item::Status(_), .. }));
        q.settle(Settled::Abandoned);
        assert!(matches!(q.next(t + BATCH_DELAY), Next::Send { item: Item::Logs(_), .. }));
        assert_eq!(q.undelivered(), (1, 5), "in flight counts as undelivered");
        q.settle(Settled::Abandoned);
        assert_eq!(q.dropped, 5);
        status(&mut q, Status::Failed, t);
        assert_eq!(take(&mut q, t), "Failed d5");
        assert_eq!(q.undelivered(), (1, 5));
    }
}
