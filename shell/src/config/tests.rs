//! Unit tests of the properties parser and the typed layer.

use super::*;

fn parse(text: &str) -> ConfigSource {
    ConfigSource::parse_properties(text, "broker.conf")
}

fn value(src: &ConfigSource, key: &str) -> Option<String> {
    src.get(key).map(|e| e.value.clone())
}

/// The module documentation's example: how a binary declares its keys.
#[test]
fn a_binary_declares_its_keys_by_reading_them() {
    struct Ns {
        port: u16,
        expiry_ms: u64,
    }
    impl Config for Ns {
        fn read(r: &mut ConfigReader<'_>) -> Result<Self, ConfigError> {
            Ok(Ns {
                port: r.port("listenPort", 9876)?,
                expiry_ms: r.get("brokerExpiredMillis", 120_000)?,
            })
        }
    }
    let src = ConfigSource::parse_properties("listenPort = 9877\nfoo=1\n", "namesrv.conf");
    let loaded = load::<Ns>(&src).unwrap();
    assert_eq!(loaded.config.port, 9877);
    assert_eq!(loaded.config.expiry_ms, 120_000);
    assert_eq!(
        loaded.warnings,
        vec!["namesrv.conf:2: unknown key 'foo' ignored".to_string()]
    );
    assert_eq!(
        loaded.render(),
        "brokerExpiredMillis=120000\nlistenPort=9877\n"
    );
}

#[test]
fn properties_accept_comments_separators_and_trimming() {
    let src = parse(
        "# comment\n! also a comment\n\n  brokerName = broker-a  \nbrokerId:0\n\
         listenPort 10911\nempty=\nflag\n",
    );
    assert_eq!(value(&src, "brokerName").as_deref(), Some("broker-a"));
    assert_eq!(value(&src, "brokerId").as_deref(), Some("0"));
    assert_eq!(value(&src, "listenPort").as_deref(), Some("10911"));
    assert_eq!(value(&src, "empty").as_deref(), Some(""));
    assert_eq!(value(&src, "flag").as_deref(), Some(""));
    assert_eq!(src.len(), 5);
    assert_eq!(
        src.get("brokerId").unwrap().origin,
        Origin::File {
            name: "broker.conf".into(),
            line: 5
        }
    );
}

#[test]
fn backslash_continues_a_line_and_escapes_resolve() {
    let src = parse("namesrvAddr=127.0.0.1:9876;\\\n    127.0.0.2:9876\nk\\=ey=a\\tb\\u0041\\\\\n");
    assert_eq!(
        value(&src, "namesrvAddr").as_deref(),
        Some("127.0.0.1:9876;127.0.0.2:9876")
    );
    assert_eq!(value(&src, "k=ey").as_deref(), Some("a\tbA\\"));
}

#[test]
fn later_values_win_and_duplicates_in_one_file_are_noted() {
    let mut src = parse("listenPort=1\nlistenPort=2\n");
    assert_eq!(value(&src, "listenPort").as_deref(), Some("2"));
    src.set("listenPort", "3", Origin::Flag("--listen".into()));
    assert_eq!(value(&src, "listenPort").as_deref(), Some("3"));
    assert_eq!(src.notes.len(), 1, "{:?}", src.notes);
    assert!(src.notes[0].starts_with("broker.conf:2: key 'listenPort'"));
}

#[test]
fn json_objects_give_each_key_its_text_and_line() {
    let text = "{\n  \"rocketMQClusterName\": \"DefaultCluster\",\n  \"grpcServerPort\": 8081,\n  \
                \"enableTopicMessageTypeCheck\": false,\n  \"none\": null,\n  \
                \"innerClientAuthenticationCredentials\": {\"accessKey\": \"ak\"}\n}\n";
    let src = ConfigSource::parse_json(text, "rmq-proxy.json").unwrap();
    assert_eq!(
        value(&src, "rocketMQClusterName").as_deref(),
        Some("DefaultCluster")
    );
    assert_eq!(value(&src, "grpcServerPort").as_deref(), Some("8081"));
    assert_eq!(
        value(&src, "enableTopicMessageTypeCheck").as_deref(),
        Some("false")
    );
    assert_eq!(
        value(&src, "innerClientAuthenticationCredentials").as_deref(),
        Some(r#"{"accessKey":"ak"}"#)
    );
    assert_eq!(src.len(), 4, "null is no value");
    assert_eq!(
        src.get("grpcServerPort").unwrap().origin,
        Origin::File {
            name: "rmq-proxy.json".into(),
            line: 3
        }
    );
    for bad in ["", "[1]", "{\"a\": 1", "grpcServerPort=1"] {
        let e = ConfigSource::parse_json(bad, "rmq-proxy.json").unwrap_err();
        assert!(e.to_string().contains("rmq-proxy.json"), "{bad:?}: {e}");
    }
}

crate::config_enum! {
    /// Test enum.
    enum Role { AsyncMaster = "ASYNC_MASTER", Slave = "SLAVE" }
}

#[derive(Debug)]
struct Demo {
    port: u16,
    id: u64,
    enabled: bool,
    role: Role,
    addrs: Vec<String>,
    zone: Option<String>,
}

impl Config for Demo {
    fn read(r: &mut ConfigReader<'_>) -> Result<Self, ConfigError> {
        Ok(Demo {
            port: r.port("listenPort", 10911)?,
            id: r.get("brokerId", 0)?,
            enabled: r.get("autoCreateTopicEnable", true)?,
            role: r.get("brokerRole", Role::AsyncMaster)?,
            addrs: r.get("namesrvAddr", Vec::new())?,
            zone: r.get_opt("zoneName")?,
        })
    }
}

#[test]
fn typed_values_parse_with_defaults() {
    let src = parse("brokerRole=slave\nnamesrvAddr=a:1; b:2,\nautoCreateTopicEnable=FALSE\n");
    let d = load::<Demo>(&src).unwrap().config;
    assert_eq!(d.port, 10911);
    assert_eq!(d.id, 0);
    assert!(!d.enabled);
    assert_eq!(d.role, Role::Slave);
    assert_eq!(d.addrs, vec!["a:1".to_string(), "b:2".to_string()]);
    assert_eq!(d.zone, None);
}

#[test]
fn invalid_value_error_names_file_line_and_key() {
    let src = parse("\n\n\n\n\n\n\n\n\n\n\nlistenPort=abc\n");
    let err = load::<Demo>(&src).unwrap_err();
    assert_eq!(
        err.to_string(),
        "broker.conf:12: listenPort: invalid port 'abc'"
    );
    let err = load::<Demo>(&parse("brokerRole=LEADER")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "broker.conf:1: brokerRole: invalid Role 'LEADER': expected one of ASYNC_MASTER SLAVE"
    );
    let err = load::<Demo>(&parse("listenPort=70000")).unwrap_err();
    assert_eq!(err.key, "listenPort");
}

#[test]
fn invalid_flag_value_names_the_flag() {
    let mut src = ConfigSource::new();
    src.set("brokerId", "-1", Origin::Flag("--broker-id".into()));
    let err = load::<Demo>(&src).unwrap_err();
    assert_eq!(
        err.to_string(),
        "flag --broker-id: brokerId: invalid u64 '-1'"
    );
}

#[test]
fn unknown_keys_are_warnings_not_errors() {
    let src = parse("listenPort=1\nstorePathCommitLog=/x\n");
    let loaded = load::<Demo>(&src).unwrap();
    assert_eq!(loaded.config.port, 1);
    assert_eq!(
        loaded.warnings,
        vec!["broker.conf:2: unknown key 'storePathCommitLog' ignored".to_string()]
    );
}

#[test]
fn effective_config_renders_sorted_and_parses_back() {
    let loaded = load::<Demo>(&parse("brokerRole=slave\nnamesrvAddr=a:1,b:2")).unwrap();
    let text = loaded.render();
    assert_eq!(
        text,
        "autoCreateTopicEnable=true\nbrokerId=0\nbrokerRole=SLAVE\nlistenPort=10911\n\
         namesrvAddr=a:1;b:2\nzoneName=\n"
    );
    let again = load::<Demo>(&parse(&text)).unwrap();
    assert_eq!(again.render(), text);
    assert!(again.warnings.is_empty());
}

#[test]
fn checked_values_report_the_rule() {
    struct D(u64);
    impl Config for D {
        fn read(r: &mut ConfigReader<'_>) -> Result<Self, ConfigError> {
            Ok(D(r.get_checked("interval", 5, |v| {
                if *v == 0 {
                    Err("must be positive".into())
                } else {
                    Ok(())
                }
            })?))
        }
    }
    let err = load::<D>(&parse("interval=0")).err().unwrap();
    assert_eq!(err.to_string(), "broker.conf:1: interval: must be positive");
    assert_eq!(load::<D>(&ConfigSource::new()).unwrap().config.0, 5);
}

#[test]
fn load_file_reports_a_missing_file() {
    let err = ConfigSource::load_file(Path::new("/nonexistent/tern.conf")).unwrap_err();
    assert!(err.to_string().contains("/nonexistent/tern.conf"), "{err}");
}
