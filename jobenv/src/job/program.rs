//! Step 9 of a run, the program, as a seam beside the [`crate::record::store::Store`]: the spine
//! hands its runner the plan, the program tree and what supervises it, and is told how it
//! ended. The real runner ([`Supervised`]) decides the shell's evaluation
//! ([`crate::evaluation`]) and runs it and the program in the tree ([`crate::run`]); the
//! spine's unit tests drive a run with a fake one, in-process.

use std::path::Path;

use crate::cancel::{Cancel, Cancelled};
use crate::error::Error;
use crate::plan::Plan;
use crate::run::tree::Tree;
use crate::run::{self, Outcome, RunOptions};

/// What runs the program of a job whose every step before held.
pub(crate) trait Program {
    /// Runs `plan`'s program in `tree`, supervised as `options` say (their `before` is the
    /// runner's own: what runs before the program, `None` as given), until it ends.
    fn run(&self, plan: &Plan, options: RunOptions<'_>, cancel: Cancel, tree: Tree) -> Result<Ran, Error>;
}

/// How a [`Program`] ended.
pub(crate) enum Ran {
    /// How the program ended (or the step before it that ended the job, or the cancel the
    /// supervisor saw before it started: [`run::not_started`]).
    Ended(Outcome),
    /// A cancel came while the job waited for another job's evaluation of its shell: the
    /// program was not started.
    NotStarted(Cancelled),
}

/// The real runner: the shell's evaluation (cached, or waited for while another job of the same
/// key evaluates it: [`crate::evaluation`]), then the program, in its tree ([`crate::run`]).
pub(crate) struct Supervised<'a> {
    /// The node's state directory, which holds the evaluation cache.
    pub state_dir: &'a Path,
}

impl Program for Supervised<'_> {
    fn run(&self, plan: &Plan, options: RunOptions<'_>, mut cancel: Cancel, tree: Tree) -> Result<Ran, Error> {
        // The shell's evaluation is a stage of its own in the trace, inside the program's.
        let evaluating = crate::telemetry::enter(crate::telemetry::Stage::Evaluation);
        let shell = match crate::evaluation::prepare(
            &plan.evaluation,
            &plan.argv,
            self.state_dir,
            options.timeout,
            &mut cancel,
        ) {
            Ok(shell) => shell,
            Err(cancelled) => return Ok(Ran::NotStarted(cancelled)),
        };
        let mut shell = Evaluating::new(shell, evaluating);
        let options = RunOptions {
            before: Some(&mut shell),
            ..options
        };
        let launch = run::Launch {
            argv: &plan.argv,
            env: &plan.env,
            secrets: &plan.secrets,
        };
        run::run(launch, options, cancel, tree).map(Ran::Ended)
    }
}

/// What runs before the program (the shell's evaluation), as a stage of the job's trace
/// ([`crate::telemetry`]): here, where the run and the trace meet, so that neither names the
/// other. The stage ends when the program
/// is next: done; or failed when the job ends there, the error that follows saying why.
pub struct Evaluating<B> {
    inner: B,
    stage: Option<crate::telemetry::Guard>,
}

impl<B: crate::run::Before> Evaluating<B> {
    pub fn new(inner: B, stage: crate::telemetry::Guard) -> Self {
        Evaluating {
            inner,
            stage: Some(stage),
        }
    }
}

impl<B: crate::run::Before> crate::run::Before for Evaluating<B> {
    fn next(&mut self, last: Option<crate::run::StepEnd>) -> Result<crate::run::Next, crate::error::Error> {
        let next = self.inner.next(last);
        match &next {
            Ok(crate::run::Next::Step(_)) => {}
            Ok(crate::run::Next::Program(_)) => self.stage.take().into_iter().for_each(crate::telemetry::Guard::done),
            // Left unsaid: open for the lines that say why (see [`crate::telemetry::Guard`]'s drop).
            Ok(crate::run::Next::End(_)) | Err(_) => drop(self.stage.take()),
        }
        next
    }

    fn waited(&self) -> std::time::Duration {
        self.inner.waited()
    }
}
