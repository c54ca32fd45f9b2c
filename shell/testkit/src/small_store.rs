//! The small store geometry every process test gives its brokers (fast to create, light
//! on disk).

/// `broker.conf` lines: 1 MiB log segments, 300-entry queue files, a small index, a
/// timer wheel of two hours of 1 s slots (230 KB, not RocketMQ's 38.7 MB) and 64 KiB
/// timer-log files, and the metrics and gRPC endpoints and the console (on for
/// `--standalone`) on free ports. Unexpired segments are deleted only past 95% disk use
/// (`diskSpaceCleanForciblyRatio`, and the warning level at 90% by default, where writes
/// stop too), not RocketMQ's 85%: on a build machine whose disk is nearly full (a large
/// `target/`) a broker would otherwise delete the segments a test is about to read (seen
/// as PULL_OFFSET_MOVED at offset 0). Tests of the watermarks set their own ratios
/// (later lines win).
pub const GEOMETRY: &str = "mapedFileSizeCommitLog=1048576\n\
mapedFileSizeConsumeQueue=6000\n\
maxHashSlotNum=1000\n\
maxIndexNum=4000\n\
timerWheelSlots=7200\n\
mappedFileSizeTimerLog=65536\n\
metricsPromExporterPort=0\n\
grpcServerPort=0\n\
consoleListen=127.0.0.1:0\n\
diskMaxUsedSpaceRatio=95\n\
diskSpaceCleanForciblyRatio=95\n";
