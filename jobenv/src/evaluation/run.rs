//! A job's evaluation at run time: the decision with the key's locks ([`prepare`]), then the
//! steps in the program tree before the program ([`Prepared`], a [`Before`]).
//!
//! A hit runs the entry's derivation at once. A miss, holding the key's evaluation lock:
//! 1. `nix-store --check-validity --print-invalid <tree> <pin>`: both must be valid paths of the
//!    store (a path under the store's directory that Nix does not know is not immutable), else
//!    the job is evaluated without the cache;
//! 2. `nix-instantiate ... --add-root <key>/shell.drv`: the evaluation, rooted where the entry's
//!    root is; its failure is the job's, exactly as nix-shell's was (message, exit code);
//! 3. `nix-store --realise --add-root <key>/in <each input derivation!its outputs> <tree> <pin>`:
//!    what nix-shell would build before it enters the shell, built now and rooted with the tree
//!    and the pin (a build failure is the job's, exit 100 as nix-shell's);
//! 4. the entry, written last; the evaluation lock let go (the key's shared lock is kept for
//!    the run).
//!
//! A failed step leaves no entry: the next job of the key evaluates again. A job that is not
//! cached runs the evaluation's step 2 alone, rooted in a directory of its own that goes when it ends.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use super::cache::{self, Cache, Entry, Kind, Lock, NotTaken, TempRoot};
use super::{Evaluation, Resolved, drv, store};
use crate::cancel::{Cancel, Cancelled};
use crate::error::Error;
use crate::run::{Before, Next, Outcome, Step, StepEnd};

/// The largest `.drv` jobenv reads for its inputs.
const MAX_DRV: u64 = 64 << 20;

/// How long a job waits for `prune` to let go of an entry it is dropping: a moment.
const PRUNE_WAIT: Duration = Duration::from_secs(10);

/// A job's evaluation, decided: what runs before its program.
pub struct Prepared {
    eval: Evaluation,
    /// The program's argv, its derivation still to be put in.
    program: Vec<String>,
    stage: Stage,
    /// How long the decision waited for another job's evaluation (it counts against the
    /// job's timeout).
    waited: Duration,
}

enum Stage {
    Hit {
        drv: String,
        _used: Lock,
    },
    Miss(Box<Miss>),
    Uncached {
        root: Option<TempRoot>,
        started: bool,
    },
    /// Nothing runs: the job ends so.
    Ended(Outcome),
}

struct Miss {
    cache: Cache,
    resolved: Resolved,
    evaluating: Option<Lock>,
    _used: Lock,
    step: MissStep,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum MissStep {
    Validity,
    Instantiate,
    Realise,
}

/// The decision, before the program tree's first process: a hit, a miss (this job evaluates,
/// others of the key wait for it, up to `wait`: the job's timeout) or not cached. The cache
/// never fails a job: what keeps it from being used (a file that cannot be read, a lock that
/// cannot be taken) makes the job evaluate as if it were not cached, with a warning. Only a
/// cancel while it waits ends the job (not started).
pub fn prepare(
    eval: &Evaluation,
    program: &[String],
    state_dir: &Path,
    wait: Option<Duration>,
    cancel: &mut Cancel,
) -> Result<Prepared, Cancelled> {
    let eval = eval.clone();
    let waited = std::cell::Cell::new(Duration::ZERO);
    let attr = eval.attr_path.clone();
    let prepared = |stage| Prepared {
        eval: eval.clone(),
        program: program.to_vec(),
        stage,
        waited: waited.get(),
    };
    let uncached = |cache: Option<&Cache>| {
        let root = cache.and_then(|cache| match cache.temp_root() {
            Ok(root) => Some(root),
            Err(error) => {
                tracing::warn!("cannot root the evaluation ({error}): evaluating without a root");
                None
            }
        });
        Stage::Uncached { root, started: false }
    };
    let resolved = match eval.resolve() {
        Ok(resolved) => resolved,
        Err(why) => {
            // As every job was evaluated before the cache: `env` says why, at any level.
            tracing::debug!("evaluating {attr} (not cached: {why})");
            let cache = Cache::open(state_dir, true).ok().flatten();
            return Ok(prepared(uncached(cache.as_ref())));
        }
    };
    let cache = match Cache::open(state_dir, true) {
        Ok(Some(cache)) => cache,
        Ok(None) => unreachable!("created if missing"),
        Err(error) => {
            tracing::warn!("the shell cache cannot be used ({error}): evaluating {attr} without it");
            return Ok(prepared(uncached(None)));
        }
    };
    let key = resolved.key.clone();
    let not_taken = |not_taken: NotTaken, what: &str| match not_taken {
        NotTaken::Cancelled(cancelled) => Err(cancelled),
        NotTaken::Busy => {
            tracing::warn!("{what} was not free in time: evaluating {attr} without the cache");
            Ok(())
        }
        NotTaken::Io(error) => {
            tracing::warn!("{what} cannot be taken ({error}): evaluating {attr} without the cache");
            Ok(())
        }
    };
    let used = match cache.lock(
        &Cache::use_lock_name(&key),
        Kind::Shared,
        Some(PRUNE_WAIT),
        Some(cancel),
        || {},
    ) {
        Ok(lock) => lock,
        Err(error) => {
            not_taken(error, "the cached shell's lock")?;
            return Ok(prepared(uncached(Some(&cache))));
        }
    };
    let expected = resolved.expected(&attr);
    // The cache's entry for the key, if usable; why not, if it is there and unusable.
    let mut unusable = None;
    let mut look = || match cache.usable(&expected) {
        Ok(entry) => entry,
        Err(why) => {
            unusable = Some(why);
            None
        }
    };
    let hit = |entry: Entry, used| {
        tracing::info!("the shell {attr} of this tree is cached: it is not evaluated");
        Ok(prepared(Stage::Hit {
            drv: entry.drv,
            _used: used,
        }))
    };
    if let Some(entry) = look() {
        return hit(entry, used);
    }
    let waiting = || tracing::info!("another job is evaluating {attr}: waiting for it");
    let started = Instant::now();
    let locked = cache.lock(
        &Cache::eval_lock_name(&key),
        Kind::Exclusive,
        wait,
        Some(cancel),
        waiting,
    );
    waited.set(started.elapsed());
    let evaluating = match locked {
        Ok(lock) => lock,
        // The job's whole timeout went by waiting: it ends as timed out, having run nothing.
        Err(NotTaken::Busy) => return Ok(prepared(Stage::Ended(Outcome::TimedOut))),
        Err(error) => {
            not_taken(error, "the evaluation's lock")?;
            return Ok(prepared(uncached(Some(&cache))));
        }
    };
    // Again: the job that held the lock has cached the shell, unless it failed.
    if let Some(entry) = look() {
        return hit(entry, used);
    }
    match unusable {
        Some(why) => tracing::info!("the cached shell {attr} cannot be used ({why}): evaluating it again"),
        None => tracing::info!("evaluating {attr} (not cached yet)"),
    }
    if let Err(error) = cache.clear(&key).and_then(|()| cache.roots_dir(&key).map(drop)) {
        tracing::warn!("the cached shell {attr} cannot be cleared ({error}): evaluating it without the cache");
        return Ok(prepared(uncached(Some(&cache))));
    }
    Ok(prepared(Stage::Miss(Box::new(Miss {
        cache,
        resolved,
        evaluating: Some(evaluating),
        _used: used,
        step: MissStep::Validity,
    }))))
}

/// A step with this environment.
fn step(argv: Vec<String>, env: &BTreeMap<String, crate::input::Var>, capture: bool) -> Next {
    let env = env
        .iter()
        .map(|(k, v)| (k.clone(), v.value.expose().to_owned()))
        .collect();
    Next::Step(Step { argv, env, capture })
}

/// The program, on `drv`.
fn program(template: &[String], drv: String) -> Next {
    let mut argv = template.to_vec();
    argv[1] = drv;
    Next::Program(argv)
}

impl Before for Prepared {
    fn waited(&self) -> Duration {
        self.waited
    }

    fn next(&mut self, last: Option<StepEnd>) -> Result<Next, Error> {
        let Prepared {
            eval,
            program: template,
            stage,
            ..
        } = self;
        let attr = &eval.attr_path;
        let miss = match stage {
            Stage::Hit { drv, .. } => return Ok(program(template, drv.clone())),
            Stage::Ended(outcome) => return Ok(Next::End(*outcome)),
            Stage::Uncached { root, started } => {
                let Some(last) = last.filter(|_| *started) else {
                    *started = true;
                    let link = root.as_ref().map(|root| root.link.clone());
                    let argv = eval.argv(&eval.root, &eval.nixpkgs, link.as_deref());
                    return Ok(step(argv, &eval.env, link.is_none()));
                };
                if last.outcome != Outcome::Exited(0) {
                    return Ok(Next::End(last.outcome));
                }
                let made = match root {
                    Some(root) => root
                        .target()
                        .map_err(|e| Error::io("cannot read the derivation nix-instantiate made", e))?,
                    None => printed_path(&last.stdout),
                };
                if !store::is_drv_path(&made, None) {
                    return Err(not_a_derivation(&made));
                }
                return Ok(program(template, made));
            }
            Stage::Miss(miss) => miss,
        };
        let env = eval.env_with_pin(&miss.resolved.nixpkgs);
        let key = miss.resolved.key.clone();
        match (miss.step, last) {
            (MissStep::Validity, None) => {
                let argv = vec![
                    eval.nix_store.display().to_string(),
                    "--check-validity".into(),
                    "--print-invalid".into(),
                    miss.resolved.root_path.clone(),
                    miss.resolved.nixpkgs_path.clone(),
                ];
                Ok(step(argv, &env, true))
            }
            (MissStep::Validity, Some(last)) => {
                if last.outcome != Outcome::Exited(0) || !last.stdout.iter().all(u8::is_ascii_whitespace) {
                    tracing::info!(
                        "evaluating {attr} without the cache: the tree or the pin is not a valid path of the Nix store"
                    );
                    let root = miss.cache.temp_root().ok();
                    *stage = Stage::Uncached { root, started: false };
                    return self.next(None);
                }
                miss.step = MissStep::Instantiate;
                let link = miss.cache.path_of(&key).join(cache::SHELL_ROOT);
                let argv = eval.argv(&miss.resolved.root, &miss.resolved.nixpkgs, Some(&link));
                Ok(step(argv, &env, false))
            }
            (MissStep::Instantiate, Some(last)) => {
                if last.outcome != Outcome::Exited(0) {
                    // Nothing is cached: the roots it may have made go too.
                    let _ = miss.cache.clear(&key);
                    return Ok(Next::End(last.outcome));
                }
                let drv = made(miss)?;
                let inputs = match read_inputs(&drv) {
                    Ok(inputs) => inputs,
                    Err(why) => {
                        tracing::warn!("the inputs of {drv} cannot be read ({why}): the shell is not cached");
                        let _ = miss.cache.clear(&key);
                        return Ok(program(template, drv));
                    }
                };
                miss.step = MissStep::Realise;
                let roots = miss.cache.path_of(&key).join(cache::INPUT_ROOTS);
                let mut argv = vec![
                    eval.nix_store.display().to_string(),
                    "--realise".into(),
                    "--add-root".into(),
                    roots.display().to_string(),
                ];
                argv.extend(inputs);
                argv.push(miss.resolved.root_path.clone());
                if miss.resolved.nixpkgs_path != miss.resolved.root_path {
                    argv.push(miss.resolved.nixpkgs_path.clone());
                }
                Ok(step(argv, &env, false))
            }
            (MissStep::Realise, Some(last)) => {
                if last.outcome != Outcome::Exited(0) {
                    let _ = miss.cache.clear(&key);
                    return Ok(Next::End(last.outcome));
                }
                let drv = made(miss)?;
                let expected = miss.resolved.expected(attr);
                let written = miss
                    .cache
                    .roots_of(&key)
                    .and_then(|roots| miss.cache.write(&Entry::new(&expected, drv.clone(), roots)));
                match written {
                    Ok(()) => tracing::debug!("the shell {attr} is cached: {drv}"),
                    Err(error) => tracing::warn!("the shell {attr} cannot be cached: {error}"),
                }
                // Jobs of the key that waited find the entry now.
                miss.evaluating = None;
                Ok(program(template, drv))
            }
            (MissStep::Instantiate | MissStep::Realise, None) => {
                unreachable!("a step of a miss is asked for again before it ended")
            }
        }
    }
}

/// The derivation a miss's evaluation made, where its root leads.
fn made(miss: &Miss) -> Result<String, Error> {
    let roots = miss
        .cache
        .roots_of(&miss.resolved.key)
        .map_err(|e| Error::io("cannot read the derivation nix-instantiate made", e))?;
    let drv = roots.get(cache::SHELL_ROOT).cloned().unwrap_or_default();
    if !store::is_drv_path(&drv, Some(&miss.resolved.store_dir)) {
        return Err(not_a_derivation(&drv));
    }
    Ok(drv)
}

fn not_a_derivation(made: &str) -> Error {
    Error::io(
        "the evaluation did not make a derivation of the Nix store",
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{:?}", crate::error::cut(made, 200)),
        ),
    )
}

/// The path nix-instantiate printed (its last line).
fn printed_path(stdout: &[u8]) -> String {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(str::trim)
        .rfind(|line| !line.is_empty())
        .unwrap_or_default()
        .to_owned()
}

/// Each input derivation of `drv` with its outputs, as `nix-store --realise` takes them
/// (`<drv>!<out>,<dev>`).
fn read_inputs(drv: &str) -> Result<Vec<String>, String> {
    let file = std::fs::File::open(drv).map_err(|e| e.to_string())?;
    let mut text = String::new();
    file.take(MAX_DRV + 1)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    if text.len() as u64 > MAX_DRV {
        return Err(format!("it is larger than {} MiB", MAX_DRV >> 20));
    }
    let inputs = drv::input_derivations(&text)?;
    inputs
        .into_iter()
        .map(|(path, outputs)| {
            let plain = |s: &str| !s.is_empty() && !s.contains([',', '!']);
            if !store::is_drv_path(&path, None) || outputs.is_empty() || !outputs.iter().all(|o| plain(o)) {
                return Err("an input derivation is not one Nix would name".to_owned());
            }
            Ok(format!("{path}!{}", outputs.join(",")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_printed_path_is_the_last_line() {
        assert_eq!(printed_path(b"/nix/store/x.drv\n"), "/nix/store/x.drv");
        assert_eq!(printed_path(b"warning\n/nix/store/x.drv\n\n"), "/nix/store/x.drv");
        assert_eq!(printed_path(b""), "");
    }
}
