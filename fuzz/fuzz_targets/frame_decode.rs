//! Any bytes from the network: the frame decoder returns a command, "need more", or an
//! error, never panics; a decoded command re-encodes to a frame that decodes the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_shell::headers::{PullMessageRequestHeader, SendMessageRequestHeader};
use tern_shell::{FrameLimits, RemotingCommand};

fuzz_target!(|data: &[u8]| {
    let limits = FrameLimits::default();
    if let Ok(Some((cmd, used))) = RemotingCommand::decode(data, &limits) {
        assert!(used <= data.len());
        let _ = SendMessageRequestHeader::from_command(&cmd);
        let _ = cmd.decode_header::<PullMessageRequestHeader>();
        if let Ok(bytes) = cmd.encode() {
            // Re-encoding may grow a header past a limit; otherwise it must read back the same.
            if let Ok(Some((back, _))) = RemotingCommand::decode(&bytes, &limits) {
                assert_eq!(back, cmd);
            }
        }
    }
    let _ = RemotingCommand::decode_payload(data, &limits);
});
