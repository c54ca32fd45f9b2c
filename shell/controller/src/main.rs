//! `tern-controller`: a controller node. Flags, config file and logging here; the node
//! itself is [`tern_controller::Controller`].

use std::process::ExitCode;

use tern_controller::{Controller, ControllerConfig};
use tern_shell::cli;
use tern_shell::config::ConfigSource;

const NAME: &str = "tern-controller";

const USAGE: &str = "\
usage: tern-controller -c FILE [-p] [--log-level LEVEL]

  -c, --config FILE     controller.conf in RocketMQ's key=value form (controllerDLegerGroup,
                        controllerDLegerPeers, controllerDLegerSelfId, controllerStorePath, ...)
  -p, --print-config    print the effective configuration (sorted key=value) and exit
      --log-level LEVEL error|warn|info|debug|trace|off (default: RUST_LOG, else info)
  -h, --help            this text
";

fn main() -> ExitCode {
    // Only the shared flags: everything else is in the file.
    let parsed = cli::parse(
        std::env::args().skip(1),
        cli::CONFIG_FLAG,
        |_: &mut (), _, _| Ok(false),
    );
    let source = |a: &cli::Args<()>| a.common.file_source(ConfigSource::load_file);
    let serve = async |config, mut signals| {
        let node = cli::or_exit(NAME, Controller::start(config).await)?;
        cli::announce(format_args!(
            "tern-controller n{} listening on {}",
            node.config().self_id,
            node.local_addr()
        ));
        cli::until_signal(&mut signals).await;
        node.shutdown().await;
        Ok(())
    };
    cli::serve::<_, ControllerConfig>(NAME, USAGE, parsed, source, serve)
}
