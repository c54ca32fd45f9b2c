//! Logging in one place: `defmt` on firmware, `log` on hosts, nothing otherwise. The rest of
//! the engine names neither.

macro_rules! log_warn {
    ($($arg:tt)*) => {{
        #[cfg(feature = "defmt")]
        defmt::warn!($($arg)*);
        #[cfg(all(feature = "log", not(feature = "defmt")))]
        log::warn!($($arg)*);
    }};
}

pub(crate) use log_warn;
