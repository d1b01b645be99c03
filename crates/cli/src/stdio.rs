//! Standard output and error that a closed reader cannot break.
//!
//! `tcplab run … | head -1` must still run its test, store it and clean up after it.
//! SIGPIPE stays ignored (Rust's default), so a write to a pipe nobody reads fails with
//! EPIPE instead of killing the process mid-test; `println!` would panic on that error
//! (in a test's thread, losing the run), so the binary prints only through [`out!`],
//! [`outln!`] and [`errln!`] (clippy's `print_stdout` and `print_stderr` are denied) and
//! hands [`Stdout`] to what writes its own output (JSON, exports, completions). A closed
//! reader stops the printing, quietly, and nothing else. Any other error writing
//! standard output (a full disk behind `>`) also stops the printing, and [`finish`]
//! reports it once at the end, failing the command.

use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Set once standard output is gone: a reader closed it, or writing it failed.
static STDOUT_GONE: AtomicBool = AtomicBool::new(false);
/// The first error writing standard output other than a closed reader.
static STDOUT_ERROR: Mutex<Option<io::Error>> = Mutex::new(None);
/// Set once standard error's reader is gone.
static STDERR_GONE: AtomicBool = AtomicBool::new(false);

/// Standard output as a writer whose writes never fail: once the reader is gone (or a
/// write failed) what follows is dropped; [`finish`] says why if it was not a closed
/// reader.
pub struct Stdout;

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !STDOUT_GONE.load(Ordering::Relaxed) {
            let written = io::stdout().lock().write_all(buf);
            stdout_result(written);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if !STDOUT_GONE.load(Ordering::Relaxed) {
            stdout_result(io::stdout().lock().flush());
        }
        Ok(())
    }
}

fn stdout_result(result: io::Result<()>) {
    let Err(e) = result else {
        return;
    };
    STDOUT_GONE.store(true, Ordering::Relaxed);
    if e.kind() != io::ErrorKind::BrokenPipe {
        let mut first = STDOUT_ERROR.lock().unwrap_or_else(|p| p.into_inner());
        first.get_or_insert(e);
    }
}

/// Prints to standard output; what [`out!`] and [`outln!`] call.
pub fn print_out(args: fmt::Arguments<'_>) {
    // Formatted first and written at once, so that lines from two threads never mix.
    // Writes to `Stdout` never fail.
    let _ = Stdout.write_all(fmt::format(args).as_bytes());
}

/// Prints to standard error, unless its reader is gone (`2>&1 | head -1`): there is no
/// one left to tell about a failure to write it.
pub fn print_err(args: fmt::Arguments<'_>) {
    if STDERR_GONE.load(Ordering::Relaxed) {
        return;
    }
    if io::stderr()
        .lock()
        .write_all(fmt::format(args).as_bytes())
        .is_err()
    {
        STDERR_GONE.store(true, Ordering::Relaxed);
    }
}

/// Flushes standard output at the end of a command and turns a failure to write it
/// (other than a closed reader) into one line and a failed command.
pub fn finish(code: std::process::ExitCode) -> std::process::ExitCode {
    let _ = Stdout.flush();
    let failed = STDOUT_ERROR
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    match failed {
        Some(e) => {
            print_err(format_args!(
                "tcplab: cannot write to standard output: {e}; what followed was not printed\n"
            ));
            std::process::ExitCode::FAILURE
        }
        None => code,
    }
}

/// `print!` to standard output, quietly stopping when its reader is gone.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::stdio::print_out(format_args!($($arg)*))
    };
}

/// `println!` to standard output, quietly stopping when its reader is gone.
macro_rules! outln {
    () => {
        $crate::stdio::print_out(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::stdio::print_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprintln!`, quietly stopping when standard error's reader is gone.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::stdio::print_err(format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use {errln, out, outln};
