//! `plain_acl.yml`, as RocketMQ 4.x reads it: global white addresses and accounts, each
//! with a secret, its own white address, an admin flag, default permissions for topics
//! and groups, and per-topic and per-group permissions (`name=PUB|SUB`).
//!
//! YAML scalars are taken as text whatever their type (`secretKey: 12345678` is the
//! secret "12345678", as Java's loader makes it).

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;

use yaml_rust2::{ScanError, Yaml, YamlLoader};

/// Permission bits (RocketMQ's `Permission`).
pub mod perm {
    /// Nothing, and it overrides every other bit.
    pub const DENY: u8 = 1;
    /// Either publish or subscribe is enough.
    pub const ANY: u8 = 1 << 1;
    /// Publish.
    pub const PUB: u8 = 1 << 2;
    /// Subscribe.
    pub const SUB: u8 = 1 << 3;

    /// `PUB`, `SUB`, `PUB|SUB`, `ANY`, `DENY`; anything else is DENY, as in RocketMQ.
    pub fn parse(s: &str) -> u8 {
        match s.trim() {
            "PUB" => PUB,
            "SUB" => SUB,
            "PUB|SUB" | "SUB|PUB" => PUB | SUB,
            "ANY" => ANY,
            _ => DENY,
        }
    }

    /// RocketMQ's `checkPermission`: whether `owned` grants `needed`.
    pub fn grants(needed: u8, owned: u8) -> bool {
        if owned & DENY != 0 {
            return false;
        }
        if needed & ANY != 0 {
            return owned & (PUB | SUB) != 0;
        }
        needed & owned != 0
    }
}

/// Why `plain_acl.yml`'s text, or an address pattern in it, is refused; the text says
/// what is wrong and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RulesError {
    /// The text is not YAML.
    Yaml(ScanError),
    /// `accounts` is there but not a list.
    AccountsNotList,
    /// The account at this place in the list (from 1) has no `accessKey`.
    NoAccessKey(usize),
    /// The account has no `secretKey`.
    NoSecretKey(String),
    /// The account's access key or secret key is shorter than RocketMQ allows.
    ShortKey(String),
    /// A `topicPerms` or `groupPerms` entry is not `name=PERM`.
    BadPermEntry {
        /// The account.
        access_key: String,
        /// `topicPerms` or `groupPerms`.
        field: &'static str,
        /// The entry as written.
        entry: String,
    },
    /// An IPv4-looking address pattern with a segment that is none of RocketMQ's forms.
    BadAddress(String),
    /// An IPv4 address pattern of fewer than 4 parts that does not end in `*`.
    ShortAddress(String),
    /// Two accounts have this access key.
    DuplicateAccount(String),
}

impl fmt::Display for RulesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Yaml(e) => write!(f, "{e}"),
            Self::AccountsNotList => f.write_str("accounts must be a list"),
            Self::NoAccessKey(n) => write!(f, "account {n} has no accessKey"),
            Self::NoSecretKey(ak) => write!(f, "account {ak} has no secretKey"),
            Self::ShortKey(ak) => write!(
                f,
                "account {ak}: accessKey and secretKey need at least 6 characters"
            ),
            Self::BadPermEntry {
                access_key,
                field,
                entry,
            } => write!(
                f,
                "account {access_key}: {field} entry '{entry}' is not name=PERM"
            ),
            Self::BadAddress(s) => write!(f, "bad address pattern '{s}'"),
            Self::ShortAddress(s) => write!(f, "address pattern '{s}' has fewer than 4 parts"),
            Self::DuplicateAccount(ak) => write!(f, "account {ak} appears twice"),
        }
    }
}

impl std::error::Error for RulesError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Yaml(e) => Some(e),
            _ => None,
        }
    }
}

/// Prefix that makes a resource a group: groups are checked as their retry topic.
pub const GROUP_PREFIX: &str = "%RETRY%";

/// Which remote addresses a pattern admits (RocketMQ's remote address strategies).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AddrPattern {
    /// Blank: admits nobody.
    Nobody,
    /// `*`, `*.*.*.*`: admits everybody.
    Everybody,
    /// IPv4 segments, each `*`, `a-b`, `{a,b,c}` or a number; segments missing after a
    /// `*` are `*` too (`192.168.*`).
    V4(Vec<Segment>),
    /// Anything else: this address exactly.
    Exact(String),
}

/// One IPv4 segment of a pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    /// Any value.
    Any,
    /// `lo..=hi`.
    Range(u8, u8),
    /// One of these.
    Set(Vec<u8>),
}

impl AddrPattern {
    /// Parses a pattern; `Err` names what is wrong.
    pub fn parse(s: &str) -> Result<AddrPattern, RulesError> {
        let s = s.trim();
        if s.is_empty() {
            return Ok(AddrPattern::Nobody);
        }
        if matches!(s, "*" | "*.*.*.*" | "*:*:*:*:*:*:*:*") {
            return Ok(AddrPattern::Everybody);
        }
        let parts: Vec<&str> = s.split('.').collect();
        let looks_v4 = parts.len() <= 4
            && parts
                .iter()
                .all(|p| p.chars().all(|c| c.is_ascii_digit() || "*-{},".contains(c)));
        if !looks_v4 {
            return Ok(AddrPattern::Exact(s.to_owned()));
        }
        let mut segs = Vec::with_capacity(4);
        for p in &parts {
            segs.push(segment(p).ok_or_else(|| RulesError::BadAddress(s.to_owned()))?);
        }
        if segs.len() < 4 {
            if segs.last() != Some(&Segment::Any) {
                return Err(RulesError::ShortAddress(s.to_owned()));
            }
            segs.resize(4, Segment::Any);
        }
        Ok(AddrPattern::V4(segs))
    }

    /// Whether `ip` is admitted.
    pub fn admits(&self, ip: IpAddr) -> bool {
        match self {
            AddrPattern::Nobody => false,
            AddrPattern::Everybody => true,
            AddrPattern::Exact(s) => s.parse::<IpAddr>().is_ok_and(|a| a == ip),
            AddrPattern::V4(segs) => match ip {
                IpAddr::V4(v4) => segs.iter().zip(v4.octets()).all(|(s, o)| match s {
                    Segment::Any => true,
                    Segment::Range(lo, hi) => (*lo..=*hi).contains(&o),
                    Segment::Set(v) => v.contains(&o),
                }),
                IpAddr::V6(_) => false,
            },
        }
    }
}

fn segment(p: &str) -> Option<Segment> {
    if p == "*" {
        return Some(Segment::Any);
    }
    if let Some(inner) = p.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
        let v: Option<Vec<u8>> = inner.split(',').map(|x| x.trim().parse().ok()).collect();
        return v.filter(|v| !v.is_empty()).map(Segment::Set);
    }
    if let Some((lo, hi)) = p.split_once('-') {
        let (lo, hi) = (lo.parse().ok()?, hi.parse().ok()?);
        return (lo <= hi).then_some(Segment::Range(lo, hi));
    }
    p.parse().ok().map(|n| Segment::Set(vec![n]))
}

/// One account.
#[derive(Clone, Debug)]
pub struct Account {
    /// Shared secret.
    pub secret_key: String,
    /// Addresses that need no signature for this account.
    pub white: AddrPattern,
    /// May run admin requests; without resource permissions, may do everything.
    pub admin: bool,
    /// Permission on topics not listed.
    pub default_topic_perm: u8,
    /// Permission on groups not listed.
    pub default_group_perm: u8,
    /// Topic and group (as `%RETRY%group`) permissions.
    pub perms: HashMap<String, u8>,
}

/// The whole file.
#[derive(Clone, Debug, Default)]
pub struct AclConfig {
    /// Addresses that need no account at all.
    pub global_white: Vec<AddrPattern>,
    /// Accounts by access key.
    pub accounts: HashMap<String, Account>,
}

/// A scalar as text (`None` for null or a missing key).
fn text(y: &Yaml) -> Option<String> {
    match y {
        Yaml::String(s) | Yaml::Real(s) => Some(s.clone()),
        Yaml::Integer(i) => Some(i.to_string()),
        Yaml::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

fn list(y: &Yaml) -> Vec<String> {
    match y {
        Yaml::Array(a) => a.iter().filter_map(text).collect(),
        other => text(other).into_iter().collect(),
    }
}

impl AclConfig {
    /// Parses the file's text; `Err` says what is wrong and where.
    pub fn parse(src: &str) -> Result<AclConfig, RulesError> {
        let docs = YamlLoader::load_from_str(src).map_err(RulesError::Yaml)?;
        let Some(doc) = docs.first() else {
            return Ok(AclConfig::default());
        };
        let mut cfg = AclConfig::default();
        for p in list(&doc["globalWhiteRemoteAddresses"]) {
            cfg.global_white.push(AddrPattern::parse(&p)?);
        }
        let accounts = match &doc["accounts"] {
            Yaml::Array(a) => a.as_slice(),
            Yaml::BadValue | Yaml::Null => &[],
            _ => return Err(RulesError::AccountsNotList),
        };
        for (i, a) in accounts.iter().enumerate() {
            let Some(ak) = text(&a["accessKey"]).filter(|s| !s.trim().is_empty()) else {
                return Err(RulesError::NoAccessKey(i + 1));
            };
            let Some(sk) = text(&a["secretKey"]).filter(|s| !s.trim().is_empty()) else {
                return Err(RulesError::NoSecretKey(ak));
            };
            // RocketMQ refuses keys shorter than 6 characters.
            if ak.len() < 6 || sk.len() < 6 {
                return Err(RulesError::ShortKey(ak));
            }
            let mut perms = HashMap::new();
            for (field, prefix) in [("topicPerms", ""), ("groupPerms", GROUP_PREFIX)] {
                for entry in list(&a[field]) {
                    let Some((name, p)) = entry.split_once('=') else {
                        return Err(RulesError::BadPermEntry {
                            access_key: ak,
                            field,
                            entry,
                        });
                    };
                    perms.insert(format!("{prefix}{}", name.trim()), perm::parse(p));
                }
            }
            let account = Account {
                secret_key: sk,
                white: AddrPattern::parse(&text(&a["whiteRemoteAddress"]).unwrap_or_default())?,
                admin: text(&a["admin"]).is_some_and(|s| s == "true"),
                default_topic_perm: perm::parse(&text(&a["defaultTopicPerm"]).unwrap_or_default()),
                default_group_perm: perm::parse(&text(&a["defaultGroupPerm"]).unwrap_or_default()),
                perms,
            };
            if cfg.accounts.insert(ak.clone(), account).is_some() {
                return Err(RulesError::DuplicateAccount(ak));
            }
        }
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      # the group should convert to retry topic
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB
  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    # if it is admin, it could access all resources
    admin: true
"#;

    #[test]
    fn rocketmqs_sample_file_parses() {
        let c = AclConfig::parse(SAMPLE).unwrap();
        assert_eq!(c.global_white.len(), 2);
        let a = &c.accounts["RocketMQ"];
        assert_eq!(a.secret_key, "12345678");
        assert_eq!(a.white, AddrPattern::Nobody);
        assert!(!a.admin);
        assert_eq!(a.default_topic_perm, perm::DENY);
        assert_eq!(a.default_group_perm, perm::SUB);
        assert_eq!(a.perms["topicB"], perm::PUB | perm::SUB);
        assert_eq!(a.perms["%RETRY%groupA"], perm::DENY);
        let b = &c.accounts["rocketmq2"];
        assert!(b.admin);
        assert!(b.white.admits("192.168.1.77".parse().unwrap()));
        assert_eq!(b.default_topic_perm, perm::DENY, "unset defaults deny");
    }

    #[test]
    fn bad_files_are_refused_with_a_reason() {
        for (src, why) in [
            ("accounts:\n  - secretKey: 12345678\n", "no accessKey"),
            ("accounts:\n  - accessKey: abcdefg\n", "no secretKey"),
            (
                "accounts:\n  - accessKey: abc\n    secretKey: 12345678\n",
                "6 characters",
            ),
            (
                "accounts:\n  - accessKey: abcdefg\n    secretKey: 12345678\n    topicPerms: [x]\n",
                "name=PERM",
            ),
            ("globalWhiteRemoteAddresses: [1.2.3.300]\n", "bad address"),
            ("accounts: 3\n", "list"),
            ("accounts: [\n", ""),
        ] {
            let e = AclConfig::parse(src).unwrap_err().to_string();
            assert!(e.contains(why), "{src:?}: {e}");
        }
    }

    /// The reasons an admin's change is answered with and a reload logs, byte for byte.
    #[test]
    fn each_reason_reads_as_it_did() {
        for (src, text) in [
            ("accounts: 3\n", "accounts must be a list"),
            (
                "accounts:\n  - secretKey: 12345678\n",
                "account 1 has no accessKey",
            ),
            (
                "accounts:\n  - accessKey: abcdefg\n",
                "account abcdefg has no secretKey",
            ),
            (
                "accounts:\n  - accessKey: abc\n    secretKey: 12345678\n",
                "account abc: accessKey and secretKey need at least 6 characters",
            ),
            (
                "accounts:\n  - accessKey: abcdefg\n    secretKey: 12345678\n    groupPerms: [g]\n",
                "account abcdefg: groupPerms entry 'g' is not name=PERM",
            ),
            (
                "accounts:\n  - {accessKey: abcdefg, secretKey: 12345678}\n  - {accessKey: abcdefg, secretKey: 12345678}\n",
                "account abcdefg appears twice",
            ),
            (
                "globalWhiteRemoteAddresses: [1.2.3.300]\n",
                "bad address pattern '1.2.3.300'",
            ),
            (
                "globalWhiteRemoteAddresses: [1.2]\n",
                "address pattern '1.2' has fewer than 4 parts",
            ),
        ] {
            assert_eq!(AclConfig::parse(src).unwrap_err().to_string(), text);
        }
        let e = AclConfig::parse("accounts: [\n").unwrap_err();
        let RulesError::Yaml(scan) = &e else {
            panic!("{e:?}")
        };
        assert_eq!(e.to_string(), scan.to_string());
        assert!(std::error::Error::source(&e).is_some());
    }

    #[test]
    fn address_patterns_follow_rocketmqs_strategies() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let p = |s: &str| AddrPattern::parse(s).unwrap();
        assert!(p("*").admits(ip("1.2.3.4")));
        assert!(!p("").admits(ip("1.2.3.4")));
        assert!(p("192.168.*").admits(ip("192.168.9.9")));
        assert!(!p("192.168.*").admits(ip("192.169.0.1")));
        assert!(p("192.168.1.1-5").admits(ip("192.168.1.5")));
        assert!(!p("192.168.1.1-5").admits(ip("192.168.1.6")));
        assert!(p("192.168.1.{1,2,3}").admits(ip("192.168.1.2")));
        assert!(!p("192.168.1.{1,2,3}").admits(ip("192.168.1.4")));
        assert!(p("127.0.0.1").admits(ip("127.0.0.1")));
        assert!(!p("127.0.0.1").admits(ip("127.0.0.2")));
        assert!(p("::1").admits(ip("::1")));
        assert!(AddrPattern::parse("1.2").is_err());
    }

    #[test]
    fn permission_checks_follow_rocketmq() {
        use perm::*;
        assert!(grants(PUB, PUB | SUB));
        assert!(!grants(PUB, SUB));
        assert!(grants(ANY, SUB));
        assert!(!grants(SUB, DENY | SUB));
        assert_eq!(parse("bogus"), DENY);
    }
}
