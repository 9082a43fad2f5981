//! One Execute, as Triton's recommended backend does it: every response is
//! created before any work (`Requests::accept`), then the batch runs
//! (`batch::process`), each request is answered and released exactly once,
//! and statistics are reported for every Execute that took requests.

use crate::backend::batch::{process, Batch};
use crate::backend::instance::InstanceState;
use crate::backend::model::ModelState;
use crate::error::{Error, Result};
use crate::triton::time::{now_ns, ExecTimes};
use crate::triton::{guard, log, InstanceHandle, Request, Requests};

/// `Err` only when the requests could not be accepted (they stay the
/// server's, which answers them with that error). Once accepted, this
/// settles every request whatever happens, panics included, and succeeds.
pub fn execute(mut instance: InstanceHandle, requests: Requests) -> Result<()> {
    let exec_start = now_ns();
    let requests = requests.accept()?;
    if requests.is_empty() {
        return Ok(());
    }
    // A panic inside leaves `requests` intact: they are answered below.
    let batch = guard::catch(|| run(&mut instance, &requests))
        .unwrap_or_else(|e| failed_batch(&requests, e));
    respond(&instance, requests, batch, exec_start);
    Ok(())
}

fn run(instance: &mut InstanceHandle, requests: &[Request]) -> Result<Batch> {
    let (model, state) = instance.states_mut::<ModelState, InstanceState>()?;
    state.enter()?;
    Ok(process(model, state, requests))
}

/// Every request gets the error that stopped the whole batch.
fn failed_batch(requests: &[Request], e: Error) -> Batch {
    log::error(&format!("execute failed for the whole batch: {e}"));
    let now = now_ns();
    Batch {
        outcomes: requests.iter().map(|_| Err(e.clone())).collect(),
        compute_start: now,
        compute_end: now,
        size: requests.len() as u64,
    }
}

/// Send each response, report each request's statistics before releasing
/// it, then the batch's.
fn respond(instance: &InstanceHandle, requests: Vec<Request>, batch: Batch, exec_start: u64) {
    let mut times = ExecTimes {
        exec_start,
        compute_start: batch.compute_start,
        compute_end: batch.compute_end,
        exec_end: 0,
    };
    for (request, outcome) in requests.into_iter().zip(batch.outcomes) {
        request.respond(outcome, |req, success| {
            times.exec_end = now_ns();
            if let Err(e) = instance.report_request(req, success, &times) {
                log::error(&format!("cannot report request statistics: {e}"));
            }
        });
    }
    times.exec_end = now_ns();
    if let Err(e) = instance.report_batch(batch.size, &times) {
        log::error(&format!("cannot report batch statistics: {e}"));
    }
}
