//! A global allocator that holds each fuzz input to a memory budget.
//!
//! The bug class this catches is "the host's memory follows the peer's claim": a length
//! field or a missing newline that makes a decoder reserve or buffer far more than the input
//! it was given. Such a decoder does not panic, so catching panics alone would miss it. The
//! budget is per thread (the driver runs one input at a time per thread, and everything a
//! target does runs on that thread, its tokio runtime included), counted as live bytes.
//!
//! When an input goes over, the allocator cannot unwind (unwinding allocates, and a panic in
//! an allocator aborts anyway), so it writes the input to the crash file the driver named
//! for this thread, says so on standard error, and aborts. Only raw `libc` calls are made on
//! that path.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

pub struct Budgeted;

thread_local! {
    /// Bytes this thread may hold while an input runs; 0 while no input runs.
    static LIMIT: Cell<usize> = const { Cell::new(0) };
    /// Bytes this thread allocated and has not freed since the input started.
    static LIVE: Cell<usize> = const { Cell::new(0) };
    /// The input being run and where to write it if it goes over (a NUL-terminated path).
    static CURRENT: Cell<(*const u8, usize, *const u8)> =
        const { Cell::new((std::ptr::null(), 0, std::ptr::null())) };
}

// SAFETY: defers every allocation to `System`; the bookkeeping touches only const-initialised
// thread-locals, which never allocate.
unsafe impl GlobalAlloc for Budgeted {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        charge(layout.size());
        // SAFETY: the caller's contract is passed through.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        charge(layout.size());
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        refund(layout.size());
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        refund(layout.size());
        charge(new_size);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

fn charge(size: usize) {
    let _ = LIMIT.try_with(|limit| {
        let limit = limit.get();
        let live = LIVE.with(|live| {
            let now = live.get().saturating_add(size);
            live.set(now);
            now
        });
        if limit != 0 && live > limit {
            over_budget(size, limit);
        }
    });
}

fn refund(size: usize) {
    let _ = LIVE.try_with(|live| live.set(live.get().saturating_sub(size)));
}

/// Starts counting this thread's memory against `limit`, with `input` to be written to
/// `crash_path` (NUL-terminated) if it goes over. Both must outlive [`stop`].
pub fn start(limit: usize, input: &[u8], crash_path: &std::ffi::CStr) {
    LIVE.with(|live| live.set(0));
    CURRENT.with(|c| c.set((input.as_ptr(), input.len(), crash_path.as_ptr().cast())));
    LIMIT.with(|l| l.set(limit));
}

/// Stops counting; returns the bytes still held (what the target leaked or kept).
pub fn stop() -> usize {
    LIMIT.with(|l| l.set(0));
    CURRENT.with(|c| c.set((std::ptr::null(), 0, std::ptr::null())));
    LIVE.with(|live| live.get())
}

/// Writes the input out and aborts. Raw syscalls only: no allocation may happen here.
fn over_budget(size: usize, limit: usize) -> ! {
    let (input, len, path) = CURRENT.with(|c| c.get());
    // SAFETY: `start` set these from a live slice and a C string that outlive the input's run.
    unsafe {
        say(b"runner-fuzz: an input went over its memory budget (");
        say_number(limit as u64);
        say(b" bytes) asking for ");
        say_number(size as u64);
        say(b" bytes more\n");
        if !path.is_null() {
            let fd = libc::open(
                path.cast(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
                0o644,
            );
            if fd >= 0 {
                let mut done = 0;
                while done < len {
                    let n = libc::write(fd, input.add(done).cast(), len - done);
                    if n <= 0 {
                        break;
                    }
                    done += n as usize;
                }
                libc::close(fd);
                say(b"runner-fuzz: the input is in ");
                say(std::ffi::CStr::from_ptr(path.cast()).to_bytes());
                say(b"\n");
            }
        }
        libc::abort();
    }
}

fn say(bytes: &[u8]) {
    // SAFETY: writing a borrowed buffer to standard error.
    unsafe {
        libc::write(2, bytes.as_ptr().cast(), bytes.len());
    }
}

fn say_number(mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    say(&digits[at..]);
}
