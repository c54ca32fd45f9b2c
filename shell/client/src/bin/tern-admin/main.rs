//! `tern-admin`: RocketMQ's mqadmin commands, names and flags, for Tern or any RocketMQ
//! cluster. Tables by default, `--json` for scripts; exit status 1 with a one-line reason
//! on failure, 2 on a usage error. Flags per command: docs/tern-admin.md.

mod cmd_acl;
mod cmd_broker;
mod cmd_config;
mod cmd_consumer;
mod cmd_controller;
mod cmd_group;
mod cmd_message;
mod cmd_namesrv;
mod cmd_print;
mod cmd_probe;
mod cmd_topic;
mod opts;
mod out;
mod progress;

use std::collections::HashMap;
use std::process::ExitCode;

use tern_client::{
    Admin, ClientConfig, ClientError, ClientTls, ClientTlsSettings, SessionCredentials,
};

/// One option of a command: `-s`/`--long`, with a value or a bare switch.
#[derive(Debug, Clone, Copy)]
pub struct Opt {
    /// Short name (mqadmin's letter).
    pub short: char,
    /// Long name (mqadmin's).
    pub long: &'static str,
    /// Takes a value.
    pub value: bool,
    /// Must be given.
    pub required: bool,
    /// Help text.
    pub help: &'static str,
    /// mqadmin's multi-letter short name (`-bn`), when it has one; `short` is then only
    /// the key its value is stored under.
    pub alias: &'static str,
}

/// Shorthand for an option with a value.
pub const fn val(short: char, long: &'static str, required: bool, help: &'static str) -> Opt {
    Opt {
        short,
        long,
        value: true,
        required,
        help,
        alias: "",
    }
}

/// An option with a value and a multi-letter short name (mqadmin's `-bn`); its value is
/// read with `Args::get(key)`.
pub const fn val_alias(
    alias: &'static str,
    key: char,
    long: &'static str,
    required: bool,
    help: &'static str,
) -> Opt {
    Opt {
        short: key,
        long,
        value: true,
        required,
        help,
        alias,
    }
}

impl Opt {
    /// How the option is written after one dash.
    fn short_name(&self) -> String {
        if self.alias.is_empty() {
            self.short.to_string()
        } else {
            self.alias.to_owned()
        }
    }
}

/// Shorthand for a switch.
pub const fn flag(short: char, long: &'static str, help: &'static str) -> Opt {
    Opt {
        short,
        long,
        value: false,
        required: false,
        help,
        alias: "",
    }
}

/// A subcommand: name, description, options, implementation.
#[derive(Debug)]
pub struct Command {
    /// mqadmin's command name.
    pub name: &'static str,
    /// One-line description.
    pub desc: &'static str,
    /// Its options (besides the common `-n`, `--json`, `-h`).
    pub opts: &'static [Opt],
    /// Runs it.
    pub run: fn(&Admin, &Args) -> Result<(), CliError>,
}

/// Parsed options of one invocation.
#[derive(Debug, Default)]
pub struct Args {
    values: HashMap<char, String>,
    /// `--json` was given.
    pub json: bool,
    /// `--tls` was given: connect with TLS.
    pub tls: bool,
    /// `--tls-trust-cert FILE`: the CA file servers' certificates are checked against.
    pub tls_trust_cert: Option<String>,
}

impl Args {
    /// The value of `-c`, trimmed.
    pub fn get(&self, c: char) -> Option<&str> {
        self.values.get(&c).map(|s| s.trim())
    }

    /// True if the option was given (switch or value).
    pub fn has(&self, c: char) -> bool {
        self.values.contains_key(&c)
    }

    /// A required value (the parser already checked presence of required options).
    pub fn req(&self, c: char) -> Result<&str, CliError> {
        self.get(c)
            .ok_or_else(|| CliError::Usage(format!("option -{c} is required")))
    }

    /// A number, or `default` when absent.
    pub fn num<T: std::str::FromStr>(&self, c: char, default: T) -> Result<T, CliError> {
        match self.get(c) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| CliError::Usage(format!("option -{c}: {v:?} is not a number"))),
        }
    }

    /// A boolean (`true`/`false`), or `default` when absent.
    pub fn bool(&self, c: char, default: bool) -> Result<bool, CliError> {
        match self.get(c) {
            None => Ok(default),
            Some(v) if v.eq_ignore_ascii_case("true") => Ok(true),
            Some(v) if v.eq_ignore_ascii_case("false") => Ok(false),
            Some(v) => Err(CliError::Usage(format!(
                "option -{c}: {v:?} is not true or false"
            ))),
        }
    }
}

/// Why a command failed.
#[derive(Debug)]
pub enum CliError {
    /// Bad command line (exit 2).
    Usage(String),
    /// The operation failed (exit 1).
    Client(ClientError),
}

impl From<ClientError> for CliError {
    fn from(e: ClientError) -> Self {
        Self::Client(e)
    }
}

const COMMANDS: &[Command] = &[
    cmd_controller::GET_CONTROLLER_META_DATA,
    cmd_controller::GET_SYNC_STATE_SET,
    cmd_controller::GET_BROKER_EPOCH,
    cmd_controller::ELECT_MASTER,
    cmd_controller::CLEAN_BROKER_METADATA,
    cmd_topic::UPDATE_TOPIC,
    cmd_topic::DELETE_TOPIC,
    cmd_topic::TOPIC_LIST,
    cmd_topic::TOPIC_ROUTE,
    cmd_topic::TOPIC_STATUS,
    cmd_topic::CLUSTER_LIST,
    cmd_topic::BROKER_STATUS,
    cmd_topic::UPDATE_SUB_GROUP,
    cmd_topic::CONSUMER_PROGRESS,
    cmd_topic::CONSUMER_CONNECTION,
    cmd_message::SEND_MESSAGE,
    cmd_message::CONSUME_MESSAGE,
    cmd_message::QUERY_MSG_BY_ID,
    cmd_message::QUERY_MSG_BY_UNIQUE_KEY,
    cmd_message::QUERY_MSG_BY_KEY,
    cmd_message::QUERY_MSG_BY_OFFSET,
    cmd_consumer::RESET_OFFSET_BY_TIME,
    cmd_consumer::CONSUMER_STATUS,
    cmd_consumer::SET_CONSUME_MODE,
    cmd_acl::UPDATE_ACL_CONFIG,
    cmd_acl::DELETE_ACL_CONFIG,
    cmd_acl::UPDATE_GLOBAL_WHITE_ADDR,
    cmd_acl::CLUSTER_ACL_CONFIG_VERSION,
    cmd_acl::GET_ACL_CONFIG,
    cmd_group::PRODUCER_CONNECTION,
    cmd_group::CLONE_GROUP_OFFSET,
    cmd_group::DELETE_SUB_GROUP,
    cmd_group::ALLOCATE_MQ,
    cmd_group::TOPIC_CLUSTER_LIST,
    cmd_broker::BROKER_CONSUME_STATS,
    cmd_broker::STATS_ALL,
    cmd_broker::QUERY_CQ,
    cmd_broker::CLEAN_EXPIRED_CQ,
    cmd_broker::CLEAN_UNUSED_TOPIC,
    cmd_print::PRINT_MSG,
    cmd_print::PRINT_MSG_BY_QUEUE,
    cmd_probe::SEND_MSG_STATUS,
    cmd_probe::CHECK_MSG_SEND_RT,
    cmd_probe::CLUSTER_RT,
    cmd_namesrv::UPDATE_KV_CONFIG,
    cmd_namesrv::DELETE_KV_CONFIG,
    cmd_namesrv::UPDATE_ORDER_CONF,
    cmd_namesrv::WIPE_WRITE_PERM,
    cmd_namesrv::ADD_WRITE_PERM,
    cmd_namesrv::GET_NAMESRV_CONFIG,
    cmd_namesrv::UPDATE_NAMESRV_CONFIG,
    cmd_config::GET_BROKER_CONFIG,
    cmd_config::UPDATE_BROKER_CONFIG,
];

const COMMON: &[Opt] = &[
    val(
        'n',
        "namesrvAddr",
        false,
        "name servers, \"host:port;host:port\" (default: $NAMESRV_ADDR)",
    ),
    flag('h', "help", "print this help"),
];

fn usage() -> String {
    let mut s = String::from(
        "usage: tern-admin <command> [-n host:port;...] [--json] [--tls-trust-cert FILE] \
         [options]\n\ncommands:\n",
    );
    for c in COMMANDS {
        s.push_str(&format!("  {:<22}{}\n", c.name, c.desc));
    }
    s.push_str("\n`tern-admin <command> -h` lists a command's options.\n");
    s
}

fn command_help(c: &Command) -> String {
    let mut s = format!("usage: tern-admin {} [options]\n{}\n\n", c.name, c.desc);
    for o in c.opts.iter().chain(COMMON) {
        let arg = if o.value { " <arg>" } else { "" };
        let req = if o.required { " (required)" } else { "" };
        s.push_str(&format!(
            "  -{},--{}{arg}\n        {}{req}\n",
            o.short_name(),
            o.long,
            o.help
        ));
    }
    s.push_str("  --json\n        print JSON instead of tables\n");
    s.push_str("  --tls\n        connect to name servers and brokers with TLS\n");
    s.push_str(
        "  --tls-trust-cert <file>\n        the CA file (PEM) the servers' certificates are \
         checked against (implies --tls)\n",
    );
    s
}

/// Parses `args` against `opts` + the common options. `-x v`, `-xv`, `--long v`,
/// `--long=v` all work, as with commons-cli.
fn parse(c: &Command, args: &[String]) -> Result<Option<Args>, String> {
    let all: Vec<Opt> = c.opts.iter().chain(COMMON).copied().collect();
    let mut out = Args::default();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if a == "--json" {
            out.json = true;
            continue;
        }
        if a == "--tls" {
            out.tls = true;
            continue;
        }
        if let Some(file) = a.strip_prefix("--tls-trust-cert") {
            let file = match file.strip_prefix('=') {
                Some(f) => f.to_owned(),
                None if file.is_empty() => {
                    let v = args
                        .get(i)
                        .ok_or_else(|| "option --tls-trust-cert needs a value".to_owned())?;
                    i += 1;
                    v.clone()
                }
                None => return Err(format!("unknown option {a}")),
            };
            out.tls_trust_cert = Some(file);
            continue;
        }
        let (opt, inline) = if let Some(long) = a.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (long, None),
            };
            let o = all
                .iter()
                .find(|o| o.long.eq_ignore_ascii_case(name))
                .ok_or_else(|| format!("unknown option --{name}"))?;
            (*o, inline)
        } else if let Some(o) = a
            .strip_prefix('-')
            .and_then(|short| all.iter().find(|o| !o.alias.is_empty() && o.alias == short))
        {
            (*o, None)
        } else if let Some(short) = a.strip_prefix('-') {
            let mut chars = short.chars();
            let ch = chars
                .next()
                .ok_or_else(|| "a lone '-' is not an option".to_owned())?;
            let rest: String = chars.collect();
            let o = all
                .iter()
                .find(|o| o.short == ch && o.alias.is_empty())
                .ok_or_else(|| format!("unknown option -{ch}"))?;
            (*o, (!rest.is_empty()).then_some(rest))
        } else {
            return Err(format!("unexpected argument {a:?}"));
        };
        if opt.short == 'h' {
            return Ok(None);
        }
        let value = if opt.value {
            match inline {
                Some(v) => v,
                None => {
                    let v = args
                        .get(i)
                        .ok_or_else(|| format!("option -{} needs a value", opt.short_name()))?;
                    i += 1;
                    v.clone()
                }
            }
        } else {
            String::new()
        };
        out.values.insert(opt.short, value);
    }
    for o in c.opts.iter().filter(|o| o.required) {
        if !out.values.contains_key(&o.short) {
            return Err(format!(
                "missing required option: -{},--{}",
                o.short_name(),
                o.long
            ));
        }
    }
    Ok(Some(out))
}

/// `--tls` / `--tls-trust-cert`: servers are always verified (`tls.client.authServer`
/// is Tern's default), so TLS needs the CA that issued their certificates.
fn tls(args: &Args) -> Result<Option<ClientTls>, String> {
    match (&args.tls_trust_cert, args.tls) {
        (Some(file), _) => ClientTls::new(&ClientTlsSettings::trusting(file)),
        (None, true) => Err(
            "--tls checks the servers' certificates: give --tls-trust-cert FILE, \
             the CA file (PEM) that issued them"
                .into(),
        ),
        (None, false) => Ok(None),
    }
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some(name) = argv.first() else {
        eprint!("{}", usage());
        return ExitCode::from(2);
    };
    if name == "-h" || name == "--help" || name == "help" {
        print!("{}", usage());
        return ExitCode::SUCCESS;
    }
    let Some(cmd) = COMMANDS.iter().find(|c| c.name.eq_ignore_ascii_case(name)) else {
        eprintln!("tern-admin: unknown command {name:?}\n");
        eprint!("{}", usage());
        return ExitCode::from(2);
    };
    let args = match parse(cmd, &argv[1..]) {
        Ok(Some(a)) => a,
        Ok(None) => {
            print!("{}", command_help(cmd));
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("tern-admin {}: {e}\n", cmd.name);
            eprint!("{}", command_help(cmd));
            return ExitCode::from(2);
        }
    };
    let ns = args
        .get('n')
        .map(str::to_owned)
        .or_else(|| std::env::var("NAMESRV_ADDR").ok())
        .filter(|s| !s.trim().is_empty());
    let ns = match ns {
        Some(ns) => Some(ns),
        // Controller commands talk to the controller named by -a and never to a name
        // server; the client only needs an address to be configured.
        None if !cmd_controller::needs_name_server(cmd.name, &args) => args
            .get('a')
            .and_then(|a| a.split(';').next())
            .map(str::to_owned),
        None => None,
    };
    let Some(ns) = ns else {
        eprintln!(
            "tern-admin {}: no name server: give -n host:port or set NAMESRV_ADDR",
            cmd.name
        );
        return ExitCode::from(2);
    };
    let mut config = ClientConfig::new(&ns);
    config.instance_name = Some(format!("tern-admin-{}", std::process::id()));
    // An ACL account for brokers with aclEnable (mqadmin reads conf/tools.yml).
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    match (env("TERN_ACCESS_KEY"), env("TERN_SECRET_KEY")) {
        (Some(ak), Some(sk)) => config.credentials = Some(SessionCredentials::new(ak, sk)),
        (None, None) => {}
        _ => {
            eprintln!(
                "tern-admin {}: set both TERN_ACCESS_KEY and TERN_SECRET_KEY, or neither",
                cmd.name
            );
            return ExitCode::from(2);
        }
    }
    match tls(&args) {
        Ok(t) => config.tls = t,
        Err(e) => {
            eprintln!("tern-admin {}: {e}", cmd.name);
            return ExitCode::from(2);
        }
    }
    let result = Admin::new(config)
        .map_err(CliError::from)
        .and_then(|admin| {
            let r = (cmd.run)(&admin, &args);
            wait(admin.shutdown());
            r
        });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Usage(e)) => {
            eprintln!("tern-admin {}: {e}", cmd.name);
            ExitCode::from(2)
        }
        Err(CliError::Client(e)) => {
            eprintln!("tern-admin {}: {e}", cmd.name);
            ExitCode::from(1)
        }
    }
}

/// Runs a future from a (synchronous) command body on the current executor.
pub fn wait<F: std::future::Future>(f: F) -> F::Output {
    tern_client::block_on(f)
}
