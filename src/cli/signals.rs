//! Ctrl-C and SIGTERM for commands that run work they can wind down: the first cancels
//! the work in flight (its sandboxes close, its processes die), a second while that is
//! still winding down exits at once, after `on_forced_exit` has recorded what it can.

use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

/// Called before a forced exit: the one chance to write down how the run ended.
pub type OnForcedExit = Box<dyn Fn() + Send + Sync>;

pub struct Signals {
    current: Arc<Mutex<CancellationToken>>,
}

impl Signals {
    /// `first` is said on standard error when the first signal arrives, if anything.
    pub fn listen(first: Option<&'static str>, on_forced_exit: OnForcedExit) -> Signals {
        let current = Arc::new(Mutex::new(CancellationToken::new()));
        let shared = current.clone();
        tokio::spawn(async move {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut int), Ok(mut term)) = (
                signal(SignalKind::interrupt()),
                signal(SignalKind::terminate()),
            ) else {
                return;
            };
            loop {
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
                let token = shared.lock().unwrap_or_else(|p| p.into_inner()).clone();
                if token.is_cancelled() {
                    // The work is already winding down and the user insists. The sandbox
                    // backends reap what is left (containers by label at the next start,
                    // servers with their parent).
                    on_forced_exit();
                    eprintln!("\nrunner: stopped");
                    std::process::exit(super::exit::INTERRUPTED as i32);
                }
                if let Some(text) = first {
                    eprintln!("\nrunner: {text}");
                }
                token.cancel();
            }
        });
        Signals { current }
    }

    /// A fresh token for the next piece of work.
    pub fn turn(&self) -> CancellationToken {
        let token = CancellationToken::new();
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = token.clone();
        token
    }
}
