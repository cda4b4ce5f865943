//! The threads that answer requests. Each request runs on a thread of its own, so a long
//! one (a command, a search) never holds up the next; but starting and ending a thread per
//! request was a fifth of a `read` call's round trip (a `read` step makes two). A thread
//! that has answered waits for the next request instead, up to [`MAX_IDLE`] of them; when
//! none is waiting, a new one starts, as before. The waiting threads end with the server:
//! they hold the pool only weakly, and its end closes their channels.

use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex, Weak};

/// One request's work.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// Threads kept waiting at most: a burst of parallel calls starts more, which end once
/// their work is done.
const MAX_IDLE: usize = 4;

#[derive(Default)]
pub(crate) struct Workers {
    /// The waiting threads, each reached through its own channel.
    idle: Mutex<Vec<Sender<Job>>>,
}

impl Workers {
    /// Runs `job` on a waiting thread, or on a new one when none waits. When no thread can
    /// be started (the sandbox is out of processes or memory), the job is dropped and
    /// `no_thread` says why, so that its request is still answered.
    pub fn run(self: &Arc<Self>, job: Job, no_thread: impl FnOnce(std::io::Error)) {
        let mut job = job;
        loop {
            let waiting = self.lock().pop();
            let Some(worker) = waiting else { break };
            match worker.send(job) {
                Ok(()) => return,
                // That thread is gone (its job panicked): try the next.
                Err(back) => job = back.0,
            }
        }
        let pool = Arc::downgrade(self);
        if let Err(e) = std::thread::Builder::new().spawn(move || work(pool, job)) {
            no_thread(e);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Sender<Job>>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Runs `first`, then every job handed to this thread, until the pool has enough waiting
/// threads or is gone.
fn work(pool: Weak<Workers>, first: Job) {
    let mut job = first;
    loop {
        job();
        // A channel for each wait, its only sender in the pool: the pool's end closes it.
        let (sender, jobs) = channel::<Job>();
        {
            let Some(pool) = pool.upgrade() else { return };
            let mut idle = pool.lock();
            if idle.len() >= MAX_IDLE {
                return;
            }
            idle.push(sender);
        }
        match jobs.recv() {
            Ok(next) => job = next,
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn thread_of(workers: &Arc<Workers>) -> std::thread::ThreadId {
        let (tx, rx) = mpsc::channel();
        workers.run(
            Box::new(move || tx.send(std::thread::current().id()).unwrap()),
            |e| panic!("{e}"),
        );
        rx.recv().unwrap()
    }

    #[test]
    fn a_thread_that_answered_takes_the_next_request() {
        let workers = Arc::new(Workers::default());
        let first = thread_of(&workers);
        // The worker puts itself back after its job; wait until it has.
        while workers.lock().is_empty() {
            std::thread::yield_now();
        }
        assert_eq!(thread_of(&workers), first);
    }

    #[test]
    fn a_long_request_does_not_hold_up_the_next() {
        let workers = Arc::new(Workers::default());
        let (release, held) = mpsc::channel::<()>();
        let (started, wait_started) = mpsc::channel();
        workers.run(
            Box::new(move || {
                started.send(()).unwrap();
                let _ = held.recv();
            }),
            |e| panic!("{e}"),
        );
        wait_started.recv().unwrap();
        // The first thread is busy: the second request gets a thread of its own.
        let (tx, rx) = mpsc::channel();
        workers.run(Box::new(move || tx.send(()).unwrap()), |e| panic!("{e}"));
        rx.recv_timeout(std::time::Duration::from_secs(5))
            .expect("the second request ran while the first was held");
        release.send(()).unwrap();
    }

    /// Says when the thread it was left on ends.
    struct OnExit(mpsc::Sender<()>);

    impl Drop for OnExit {
        fn drop(&mut self) {
            let _ = self.0.send(());
        }
    }

    thread_local! {
        static EXIT: std::cell::RefCell<Option<OnExit>> = const { std::cell::RefCell::new(None) };
    }

    #[test]
    fn waiting_threads_end_with_the_pool() {
        let workers = Arc::new(Workers::default());
        let (ended, wait_ended) = mpsc::channel();
        workers.run(
            Box::new(move || {
                EXIT.with(|e| *e.borrow_mut() = Some(OnExit(ended)));
            }),
            |e| panic!("{e}"),
        );
        while workers.lock().is_empty() {
            std::thread::yield_now();
        }
        drop(workers);
        wait_ended
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("the waiting thread ended with the pool");
    }
}
