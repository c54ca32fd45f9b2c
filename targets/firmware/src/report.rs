//! Output through semihosting, and the one way out on failure.
//!
//! Every line starts with `tern-firmware:` so the runner can pick them out of QEMU's
//! output. A failed check prints `tern-firmware: FAIL <what>` and exits QEMU with a failure
//! status; nothing fails silently or spins.

use core::fmt;

use cortex_m_semihosting::{debug, hprintln};

/// Prints one `tern-firmware:` line.
macro_rules! say {
    ($($arg:tt)+) => {
        cortex_m_semihosting::hprintln!("tern-firmware: {}", format_args!($($arg)+))
    };
}

/// Fails the run with the message unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            $crate::report::fail(format_args!($($arg)+))
        }
    };
}

/// The `Ok` value of `res`, or a failed run naming what was being done and the error.
macro_rules! must {
    ($res:expr, $($arg:tt)+) => {
        match $res {
            Ok(v) => v,
            Err(e) => $crate::report::fail(format_args!("{}: {:?}", format_args!($($arg)+), e)),
        }
    };
}

pub(crate) use {ensure, must, say};

/// Reports a failure and ends the run: QEMU exits with a non-zero status.
pub fn fail(what: fmt::Arguments<'_>) -> ! {
    hprintln!("tern-firmware: FAIL {}", what);
    exit(debug::EXIT_FAILURE)
}

/// Ends the run with `status` as QEMU's exit status.
pub fn exit(status: debug::ExitStatus) -> ! {
    debug::exit(status);
    // Only reached without a semihosting host (on real hardware with no debugger
    // attached the BKPT above faults instead): stop here rather than run on.
    loop {
        cortex_m::asm::wfi();
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    // The engine panics only on a broken invariant of its caller (an impossible
    // geometry); report it like any failed check.
    fail(format_args!("panic: {info}"))
}

#[cortex_m_rt::exception]
unsafe fn HardFault(frame: &cortex_m_rt::ExceptionFrame) -> ! {
    fail(format_args!(
        "hard fault at pc {:#010x} (lr {:#010x})",
        frame.pc(),
        frame.lr()
    ))
}
