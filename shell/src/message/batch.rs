//! SEND_BATCH_MESSAGE bodies (§4.5): `TOTALSIZE | MAGIC 0 | BODYCRC 0 | FLAG | BODYLEN+body
//! | PROPLEN+props` per message, back to back. Topic, queue and sysFlag come from the header.

use super::{Message, properties_len, string_to_properties, write_properties};
use crate::body::BodyError;

/// Fixed bytes of one batch item besides body and properties.
const ITEM_FIXED_BYTES: usize = 4 + 4 + 4 + 4 + 4 + 2;
/// Most items a batch may hold; a bound on work driven by the peer.
pub const MAX_BATCH_ITEMS: usize = 100_000;

/// One message of a decoded batch, borrowing the body from the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchItem<'a> {
    /// User flag.
    pub flag: i32,
    /// Body bytes.
    pub body: &'a [u8],
    /// Properties string bytes (`name␁value␂...`).
    pub properties: &'a [u8],
}

impl BatchItem<'_> {
    /// The properties as a map.
    pub fn properties_map(&self) -> std::collections::BTreeMap<String, String> {
        string_to_properties(self.properties)
    }
}

/// Encodes messages into a batch body. Fails if a properties string exceeds 32767 bytes
/// or a body 2 GiB (Java's short/int lengths).
pub fn encode_batch(messages: &[Message]) -> Result<Vec<u8>, BodyError> {
    let lens: Vec<usize> = messages
        .iter()
        .map(|m| properties_len(&m.properties))
        .collect();
    let size: usize = messages
        .iter()
        .zip(&lens)
        .map(|(m, p)| ITEM_FIXED_BYTES + m.body.len() + p)
        .sum();
    // Sized once and properties written in place: growing the body and building each
    // properties string first cost a realloc and two copies per message.
    let mut out = Vec::with_capacity(size);
    for (m, &props) in messages.iter().zip(&lens) {
        let props_len = i16::try_from(props)
            .map_err(|_| BodyError::Binary("properties longer than 32767 bytes"))?;
        let body_len =
            i32::try_from(m.body.len()).map_err(|_| BodyError::Binary("body too long"))?;
        let total = ITEM_FIXED_BYTES + m.body.len() + props;
        let total = i32::try_from(total).map_err(|_| BodyError::Binary("message too long"))?;
        out.extend_from_slice(&total.to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&m.flag.to_be_bytes());
        out.extend_from_slice(&body_len.to_be_bytes());
        out.extend_from_slice(&m.body);
        out.extend_from_slice(&props_len.to_be_bytes());
        write_properties(&mut out, &m.properties);
    }
    Ok(out)
}

/// Decodes a batch body; every length is checked against the bytes actually present.
pub fn decode_batch(body: &[u8]) -> Result<Vec<BatchItem<'_>>, BodyError> {
    let mut items = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        if items.len() >= MAX_BATCH_ITEMS {
            return Err(BodyError::Binary("too many messages in batch"));
        }
        let total = usize::try_from(be_i32(rest, 0)?)
            .map_err(|_| BodyError::Binary("negative item size"))?;
        let item = rest
            .get(..total)
            .ok_or(BodyError::Binary("batch item longer than body"))?;
        let flag = be_i32(item, 12)?;
        let body_len = usize::try_from(be_i32(item, 16)?)
            .map_err(|_| BodyError::Binary("negative body length"))?;
        let msg_body = item
            .get(20..20 + body_len)
            .ok_or(BodyError::Binary("body longer than item"))?;
        let props_at = 20 + body_len;
        let props_len = item
            .get(props_at..props_at + 2)
            .map(|b| i16::from_be_bytes([b[0], b[1]]))
            .ok_or(BodyError::Binary("truncated properties length"))?;
        let props_len = usize::try_from(props_len)
            .map_err(|_| BodyError::Binary("negative properties length"))?;
        let properties = item
            .get(props_at + 2..props_at + 2 + props_len)
            .ok_or(BodyError::Binary("properties longer than item"))?;
        if props_at + 2 + props_len != total {
            return Err(BodyError::Binary("item size disagrees with its parts"));
        }
        items.push(BatchItem {
            flag,
            body: msg_body,
            properties,
        });
        rest = rest.get(total..).unwrap_or_default();
    }
    Ok(items)
}

fn be_i32(b: &[u8], at: usize) -> Result<i32, BodyError> {
    let s = b
        .get(at..at + 4)
        .ok_or(BodyError::Binary("truncated batch item"))?;
    Ok(i32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_round_trips() {
        let msgs = vec![
            Message::new("t", "one").with_property("UNIQ_KEY", "A"),
            Message {
                flag: 7,
                ..Message::new("t", vec![0u8; 1000])
            },
        ];
        let body = encode_batch(&msgs).unwrap();
        let items = decode_batch(&body).unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].body, b"one");
        assert_eq!(items[0].properties_map()["UNIQ_KEY"], "A");
        assert_eq!(items[1].flag, 7);
        assert_eq!(items[1].body.len(), 1000);
    }

    #[test]
    fn truncated_or_lying_batches_are_errors() {
        let body = encode_batch(&[Message::new("t", "abc").with_property("K", "v")]).unwrap();
        for cut in 1..body.len() {
            assert!(decode_batch(&body[..cut]).is_err(), "cut at {cut}");
        }
        let mut lying = body.clone();
        lying[19] = 200;
        assert!(decode_batch(&lying).is_err());
    }
}
