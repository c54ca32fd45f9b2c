use super::*;
use crate::code::RequestCode;
use proptest::prelude::*;

#[test]
fn json_header_matches_java_layout() {
    let mut cmd = RemotingCommand::request_code(RequestCode::Other(0)).with_ext("queueId", "1");
    cmd.flag = 1;
    cmd.opaque = 42;
    let text = encode_json_header(&cmd);
    assert_eq!(
        text,
        r#"{"code":0,"extFields":{"queueId":"1"},"flag":1,"language":"JAVA","opaque":42,"serializeTypeCurrentRPC":"JSON","version":479}"#
    );
}

#[test]
fn cpp_style_numeric_ext_values_become_strings() {
    let header = br#"{"code":10,"extFields":{"queueId":3,"batch":"0","sysFlag":0,"ok":true,"n":null},"flag":0,"language":"CPP","opaque":5,"remark":"","version":63}"#;
    let cmd = decode_json_header(header).unwrap();
    assert_eq!(cmd.ext_fields["queueId"], "3");
    assert_eq!(cmd.ext_fields["ok"], "true");
    assert!(!cmd.ext_fields.contains_key("n"));
    assert_eq!(cmd.language, LanguageCode::Cpp);
    assert_eq!(cmd.remark.as_deref(), Some(""));
}

/// The headers Java's fastjson and the C++ client's jsoncpp write take the one-pass reader
/// (a SEND_MESSAGE_V2 whose properties hold their control-character separators; the C++
/// client's numbers and booleans among the extFields; whitespace between tokens).
#[test]
fn real_client_headers_take_the_one_pass_reader() {
    let java = r#"{"code":310,"extFields":{"a":"pg","b":"T","c":"TBW102","d":"4","e":"1","f":"0","g":"1700000000000","h":"0","i":"KEYS\u0001k1\u0002UNIQ_KEY\u0001AC1\u0002WAIT\u0001true\u0002","j":"0","k":"false","m":"false","n":"broker-a"},"flag":0,"language":"JAVA","opaque":77,"serializeTypeCurrentRPC":"JSON","version":475}"#;
    let cmd = plain::decode_plain(java).expect("plain");
    assert_eq!(cmd, decode_via_tree(java.as_bytes()).unwrap());
    assert_eq!(
        cmd.ext_fields["i"],
        "KEYS\u{1}k1\u{2}UNIQ_KEY\u{1}AC1\u{2}WAIT\u{1}true\u{2}"
    );
    let cpp = r#"{ "code" : 10, "extFields" : { "batch" : "0", "n" : null, "ok" : true, "queueId" : 3, "sysFlag" : -2 }, "flag" : 0, "language" : "CPP", "opaque" : 5, "remark" : "", "version" : 63 }"#;
    let cmd = plain::decode_plain(cpp).expect("plain");
    assert_eq!(cmd, decode_via_tree(cpp.as_bytes()).unwrap());
    assert_eq!(cmd.ext_fields["sysFlag"], "-2");
    // Outside the plain shape: left to the full decoder.
    for other in [
        r#"{"code":1.0}"#,
        r#"{"code":"10"}"#,
        r#"{"extFields":{"a":[1]}}"#,
        r#"{"remark":"\ud83d\ude00"}"#,
        r#"{"other":1}"#,
        r#"{"code":01}"#,
        r#"{"code":1,}"#,
    ] {
        assert_eq!(plain::decode_plain(other), None, "{other}");
    }
}

#[test]
fn strings_are_escaped_as_serde_json_escapes_them() {
    let mut every: String = (0u32..0x80).filter_map(char::from_u32).collect();
    every.push_str("é中\u{2028}😀\\\"/");
    for s in [every.as_str(), "", "plain", "\"", "a\u{1f}b", "\\\\"] {
        let mut out = String::new();
        push_json_str(&mut out, s);
        assert_eq!(out, serde_json::to_string(s).unwrap());
    }
}

#[test]
fn a_repeated_key_keeps_its_last_value() {
    let cmd = decode_json_header(br#"{"code":"x","code":7,"extFields":{"a":"1","a":null,"b":"1","b":"2"},"remark":"no","remark":null}"#).unwrap();
    assert_eq!(cmd.code, 7);
    assert!(!cmd.ext_fields.contains_key("a"));
    assert_eq!(cmd.ext_fields["b"], "2");
    assert_eq!(cmd.remark, None);
    assert!(decode_json_header(br#"{"code":7,"code":1.5}"#).is_err());
    assert!(decode_json_header(br#"{"extFields":{},"extFields":[1]}"#).is_err());
}

/// The decoder this module's replaced, through a `serde_json::Value` tree: the reference.
fn decode_via_tree(header: &[u8]) -> Result<RemotingCommand, FrameError> {
    let value: Value =
        serde_json::from_slice(header).map_err(|e| FrameError::BadJsonHeader(e.to_string()))?;
    let Value::Object(mut obj) = value else {
        return Err(FrameError::BadJsonHeader("header is not an object".into()));
    };
    let int = |obj: &serde_json::Map<String, Value>, key: &str| -> Result<i32, FrameError> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(0),
            Some(Value::Number(n)) => n
                .as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .ok_or_else(|| FrameError::BadJsonHeader(key.into())),
            Some(Value::String(s)) => s
                .trim()
                .parse()
                .map_err(|_| FrameError::BadJsonHeader(key.into())),
            Some(_) => Err(FrameError::BadJsonHeader(key.into())),
        }
    };
    let language = match obj.get("language") {
        Some(Value::String(name)) => LanguageCode::from_name(name),
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|n| u8::try_from(n).ok())
            .map(LanguageCode::from_raw)
            .filter(|l| !matches!(l, LanguageCode::Other(_)))
            .unwrap_or(LanguageCode::OtherLanguage),
        _ => LanguageCode::OtherLanguage,
    };
    let remark = match obj.remove("remark") {
        Some(Value::String(s)) => Some(s),
        Some(Value::Null) | None => None,
        Some(other) => Some(other.to_string()),
    };
    let mut ext_fields = ExtFields::new();
    match obj.remove("extFields") {
        Some(Value::Object(map)) => {
            for (k, v) in map {
                let v = match v {
                    Value::Null => continue,
                    Value::String(s) => s,
                    Value::Bool(b) => b.to_string(),
                    other => other.to_string(),
                };
                ext_fields.insert(k, v);
            }
        }
        Some(Value::Null) | None => {}
        Some(_) => return Err(FrameError::BadJsonHeader("extFields".into())),
    }
    Ok(RemotingCommand {
        code: int(&obj, "code")?,
        language,
        version: int(&obj, "version")?,
        opaque: int(&obj, "opaque")?,
        flag: int(&obj, "flag")?,
        remark,
        ext_fields,
        body: Vec::new(),
        serialize_type: SerializeType::Json,
    })
}

/// JSON text of any shape, weighted toward what headers hold.
fn json_value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_owned()),
        any::<bool>().prop_map(|b| b.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        (-3i32..300).prop_map(|n| n.to_string()),
        prop_oneof![
            Just("1.0"),
            Just("-0.0"),
            Just("1e3"),
            Just("2.5E-3"),
            Just("123456789012345678901234567890")
        ]
        .prop_map(str::to_owned),
        "[ -~é\\\\\"\n\t\u{1}]{0,8}".prop_map(|s| serde_json::to_string(&s).unwrap()),
        (-3i32..300).prop_map(|n| format!("\" {n} \"")),
        prop_oneof![
            Just("\"JAVA\""),
            Just("\"CPP\""),
            Just("\"GO\""),
            Just("\"\"")
        ]
        .prop_map(str::to_owned),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec((key(), inner), 0..5).prop_map(|kv| object(&kv)),
        ]
    })
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop_oneof![
            Just("code"),
            Just("version"),
            Just("opaque"),
            Just("flag"),
            Just("language"),
            Just("remark"),
            Just("extFields"),
            Just("serializeTypeCurrentRPC"),
            Just("queueId"),
            Just("topic"),
        ]
        .prop_map(str::to_owned),
        "[a-z\u{e9}\"\\\\]{0,5}",
    ]
}

fn object(kv: &[(String, String)]) -> String {
    let fields: Vec<String> = kv
        .iter()
        .map(|(k, v)| format!("{}:{v}", serde_json::to_string(k).unwrap()))
        .collect();
    format!("{{{}}}", fields.join(","))
}

/// A header-like object: its known keys (some twice), and extFields of any values.
fn header() -> impl Strategy<Value = String> {
    let ext = prop::collection::vec((key(), json_value()), 0..6).prop_map(|kv| object(&kv));
    let field = prop_oneof![
        3 => (key(), json_value()),
        2 => ext.prop_map(|e| ("extFields".to_owned(), e)),
    ];
    prop::collection::vec(field, 0..8).prop_map(|kv| object(&kv))
}

/// JSON whitespace, often none.
fn ws() -> impl Strategy<Value = String> {
    prop_oneof![3 => Just(String::new()), 1 => "[ \t\r\n]{1,3}"]
}

/// A string literal with any escape JSON allows except surrogates, in either case of hex.
fn plain_string() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        "[ -~é中]{0,6}".prop_map(|s| {
            let quoted = serde_json::to_string(&s).unwrap();
            quoted[1..quoted.len() - 1].to_owned()
        }),
        prop_oneof![
            Just("\\\""),
            Just("\\\\"),
            Just("\\/"),
            Just("\\b"),
            Just("\\f"),
            Just("\\n"),
            Just("\\r"),
            Just("\\t"),
            Just("\\u0001"),
            Just("\\u00E9"),
            Just("\\u4e2D"),
            Just("\\u0000"),
        ]
        .prop_map(str::to_owned),
    ];
    prop::collection::vec(piece, 0..4).prop_map(|p| format!("\"{}\"", p.concat()))
}

/// A header in the shape real clients write, keys repeated and in any order, with
/// whitespace between tokens: all of it is the one-pass reader's.
fn plain_header() -> impl Strategy<Value = String> {
    let int = prop_oneof![
        any::<i32>().prop_map(|n| n.to_string()),
        (-3i32..400).prop_map(|n| n.to_string()),
        Just("null".to_owned()),
    ];
    let ext_value = prop_oneof![
        4 => plain_string(),
        1 => any::<i64>().prop_map(|n| n.to_string()),
        1 => prop_oneof![Just("true"), Just("false"), Just("null")].prop_map(str::to_owned),
    ];
    let ext = prop_oneof![
        4 => prop::collection::vec((plain_string(), ext_value, ws()), 0..8).prop_map(|kv| {
            let members: Vec<String> = kv.iter().map(|(k, v, w)| format!("{w}{k}{w}:{w}{v}{w}")).collect();
            format!("{{{}}}", members.join(","))
        }),
        1 => Just("null".to_owned()),
    ];
    let member = prop_oneof![
        (
            prop_oneof![Just("code"), Just("flag"), Just("opaque"), Just("version")],
            int
        )
            .prop_map(|(k, v)| (k.to_owned(), v)),
        prop_oneof![
            Just("\"JAVA\""),
            Just("\"CPP\""),
            Just("\"GO\""),
            Just("\"\"")
        ]
        .prop_map(|v| ("language".to_owned(), v.to_owned())),
        prop_oneof![plain_string(), Just("null".to_owned())].prop_map(|v| ("remark".to_owned(), v)),
        Just(("serializeTypeCurrentRPC".to_owned(), "\"JSON\"".to_owned())),
        ext.prop_map(|v| ("extFields".to_owned(), v)),
    ];
    (prop::collection::vec((member, ws()), 0..9), ws()).prop_map(|(members, w)| {
        let members: Vec<String> = members
            .iter()
            .map(|((k, v), w)| format!("{w}\"{k}\"{w}:{w}{v}{w}"))
            .collect();
        format!("{w}{{{}}}{w}", members.join(","))
    })
}

fn same(text: &[u8]) -> Result<(), TestCaseError> {
    let (ours, tree) = (decode_json_header(text), decode_via_tree(text));
    // The one-pass reader answers only what the tree decodes, and as it does.
    if let Some(plain) = std::str::from_utf8(text).ok().and_then(plain::decode_plain) {
        prop_assert_eq!(
            Ok(&plain),
            tree.as_ref(),
            "{}",
            String::from_utf8_lossy(text)
        );
    }
    match (&ours, &tree) {
        (Ok(a), Ok(b)) => prop_assert_eq!(a, b, "{}", String::from_utf8_lossy(text)),
        (Err(_), Err(_)) => {}
        _ => prop_assert!(
            false,
            "{}: {ours:?} against the tree's {tree:?}",
            String::from_utf8_lossy(text)
        ),
    }
    Ok(())
}

/// `text` with one byte replaced, then cut short: each decodes as the tree decodes it.
fn damaged(
    text: String,
    cut: prop::sample::Index,
    flip: prop::sample::Index,
    byte: u8,
) -> Result<(), TestCaseError> {
    let mut bytes = text.into_bytes();
    if !bytes.is_empty() {
        let at = flip.index(bytes.len());
        bytes[at] = byte;
        same(&bytes)?;
        bytes.truncate(cut.index(bytes.len()));
    }
    same(&bytes)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn decodes_as_the_tree_decoder_does(text in header()) {
        same(text.as_bytes())?;
    }

    #[test]
    fn plain_headers_take_the_one_pass_reader(text in plain_header()) {
        let plain = plain::decode_plain(&text);
        prop_assert!(plain.is_some(), "{}", text);
        same(text.as_bytes())?;
    }

    #[test]
    fn decodes_damaged_plain_headers_as_the_tree_decoder_does(
        text in plain_header(),
        cut in any::<prop::sample::Index>(),
        flip in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        damaged(text, cut, flip, byte)?;
    }

    #[test]
    fn decodes_any_json_as_the_tree_decoder_does(text in json_value()) {
        same(text.as_bytes())?;
    }

    #[test]
    fn decodes_damaged_headers_as_the_tree_decoder_does(
        text in header(),
        cut in any::<prop::sample::Index>(),
        flip in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        damaged(text, cut, flip, byte)?;
    }

    #[test]
    fn encoded_headers_decode_back(
        code in any::<i32>(),
        opaque in any::<i32>(),
        remark in proptest::option::of("[ -~é\"\\\\\n]{0,12}"),
        ext in prop::collection::btree_map("[a-zA-Z\"\\\\]{1,6}", "[ -~é中\"\\\\\n\u{1}]{1,10}", 0..6),
    ) {
        let mut cmd = RemotingCommand::request_code(RequestCode::Other(0));
        cmd.code = code;
        cmd.opaque = opaque;
        cmd.remark = remark;
        cmd.ext_fields = ext.into_iter().collect();
        let text = encode_json_header(&cmd);
        // What we write is plain: a peer's copy of it takes the one-pass reader.
        prop_assert_eq!(plain::decode_plain(&text), Some(cmd.clone()));
        prop_assert_eq!(decode_json_header(text.as_bytes()).unwrap(), cmd);
    }
}
