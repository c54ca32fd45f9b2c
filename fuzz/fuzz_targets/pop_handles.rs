//! POP's peer- and disk-given formats: receipt handles (`extraInfo` of ACK and
//! CHANGE_INVISIBLETIME), the offset-info headers, checkpoint and ack records read back
//! from the revive topic, and BATCH_ACK_MESSAGE bodies. Each parses or is refused, never
//! panics; a handle that parses builds back to a string that parses to the same value;
//! a checkpoint that parses answers every offset query within its own messages.
//!
//! Input: a mode byte, then the text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_shell::body::{BatchAckMessageRequestBody, from_json};
use tern_shell::pop::{
    AckMsg, ExtraInfo, PopCheckPoint, parse_msg_offset_info, parse_start_offset_info,
};

fuzz_target!(|data: &[u8]| {
    let Some((mode, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    match mode % 5 {
        0 => {
            if let Ok(h) = ExtraInfo::parse(&text) {
                let again = ExtraInfo::parse(&h.build()).expect("a built handle parses");
                assert_eq!(again, h);
            }
        }
        1 => {
            let _ = parse_start_offset_info(&text);
            let _ = parse_msg_offset_info(&text);
        }
        2 => {
            if let Ok(ck) = PopCheckPoint::parse(rest) {
                for i in 0..usize::from(ck.num) {
                    let o = ck.offset_of(i);
                    assert!(ck.index_of(o).is_some());
                }
                let _ = (ck.merge_key(), ck.uniq_key(), ck.revive_time());
            }
        }
        3 => {
            if let Ok(a) = AckMsg::parse(rest) {
                let _ = (a.offsets(), a.merge_key(), a.uniq_key());
            }
        }
        _ => {
            if let Ok(b) = from_json::<BatchAckMessageRequestBody>(rest) {
                for a in b.acks.iter().take(64) {
                    if let Ok(offsets) = a.offsets() {
                        assert!(offsets.len() <= 32);
                    }
                    let _ = a.retry_flag();
                }
            }
        }
    }
});
