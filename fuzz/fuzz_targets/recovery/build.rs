//! The two ways the recovery target builds a state to open: `raw` bytes shaped into
//! segments, queue and index files and a checkpoint, or a `history` of real operations
//! ended by a crash the input chooses.

use std::collections::HashMap;

use super::*;

/// Where a well-formed record was put by [`build_raw`].
struct Placed {
    offset: u64,
    size: u32,
    topic: String,
    keys: Option<String>,
}

/// The raw builder: segments, queue, index and checkpoint written byte by byte.
pub(super) fn build_raw<'a>(inp: &mut Input<'_>, mut p: Parts<'a>) -> Option<Parts<'a>> {
    let flags = inp.byte();
    let segs = 1 + u64::from(flags & 3);
    let first = u64::from((flags >> 2) & 3) * LOG_SEG;
    let end = first + segs * LOG_SEG;
    let mut image = vec![0u8; (segs * LOG_SEG) as usize];
    let mut placed: Vec<Placed> = Vec::new();
    let mut queue_offsets: HashMap<(String, i32), i64> = HashMap::new();
    let mut pos = first;
    for n in 0..MAX_OPS {
        if inp.is_empty() || pos >= end {
            break;
        }
        let at = (pos - first) as usize;
        let seg_end = pos - pos % LOG_SEG + LOG_SEG;
        match inp.byte() % 6 {
            0 => {
                let len = inp.byte() as usize;
                let raw = inp.bytes(len.min(image.len() - at));
                image[at..at + raw.len()].copy_from_slice(raw);
                pos += raw.len() as u64;
            }
            1 | 2 => {
                let m = Msg::from_input(inp, n);
                let how = inp.byte();
                let msg = m.message();
                let Ok(len) = msg.encoded_len() else { continue };
                let mut pos_now = pos;
                if pos_now + len as u64 + 8 > seg_end {
                    // Does not fit: a blank tail, as the writer would leave.
                    let at = (pos_now - first) as usize;
                    if seg_end - pos_now >= 8 {
                        image[at..at + 4]
                            .copy_from_slice(&((seg_end - pos_now) as i32).to_be_bytes());
                        image[at + 4..at + 8].copy_from_slice(&MAGIC_BLANK.to_be_bytes());
                    }
                    pos_now = seg_end;
                    if pos_now + len as u64 + 8 > end.min(seg_end + LOG_SEG) {
                        pos = pos_now;
                        continue;
                    }
                }
                let q = queue_offsets
                    .entry((m.topic.clone(), m.queue_id))
                    .or_default();
                let stamp = StoreStamp {
                    queue_offset: if how & 1 == 0 {
                        *q
                    } else {
                        i64::from(inp.byte())
                    },
                    physical_offset: if how & 2 == 0 {
                        pos_now as i64
                    } else {
                        inp.u64() as i64
                    },
                    store_timestamp: if how & 4 == 0 {
                        BASE_TS + n as i64
                    } else {
                        inp.u64() as i64
                    },
                };
                *q += 1;
                let at = (pos_now - first) as usize;
                let out = &mut image[at..at + len];
                if how & 8 == 0 {
                    msg.encode(stamp, out).unwrap();
                } else {
                    msg.encode_with_crc(stamp, i32::from(inp.byte()), out)
                        .unwrap();
                }
                placed.push(Placed {
                    offset: pos_now,
                    size: len as u32,
                    topic: m.topic.clone(),
                    keys: properties::get(&m.props, key::KEYS).map(str::to_string),
                });
                pos = pos_now + len as u64;
            }
            3 => {
                // A blank tail, sometimes with a wrong size.
                let size = if inp.byte() & 1 == 0 {
                    (seg_end - pos) as i32
                } else {
                    i32::from(inp.u16())
                };
                if seg_end - pos >= 8 {
                    image[at..at + 4].copy_from_slice(&size.to_be_bytes());
                    image[at + 4..at + 8].copy_from_slice(&MAGIC_BLANK.to_be_bytes());
                }
                pos = seg_end;
            }
            4 => pos += u64::from(inp.byte()),
            _ => {
                let i = inp.u16() as usize % image.len();
                image[i] ^= 1 << (inp.byte() % 8);
            }
        }
    }
    // Segments: normally contiguous and of the configured size; the input may ask for a
    // gap or a short segment, which open must refuse, not trip over.
    let shape = inp.byte();
    for k in 0..segs {
        if shape & 0x0F == 1 && k == 1 && segs > 2 {
            continue;
        }
        let len = if shape & 0x0F == 2 && k + 1 == segs {
            LOG_SEG / 2
        } else {
            LOG_SEG
        };
        let base = first + k * LOG_SEG;
        p.log.create(base, len).ok()?;
        let from = (k * LOG_SEG) as usize;
        p.log
            .media_mut(base)?
            .write_at(0, &image[from..from + len as usize])
            .ok()?;
    }

    let what = inp.byte();
    if what & 1 != 0 {
        build_queue(inp, &mut p, &placed)?;
    }
    if what & 2 != 0 {
        build_index(inp, &mut p, &placed)?;
    }
    match (what >> 2) % 4 {
        0 => {}
        1 => {
            let raw = inp.bytes(68);
            p.checkpoint.write_at(0, raw).ok()?;
        }
        _ => {
            let pick = |inp: &mut Input<'_>| match inp.byte() % 5 {
                0 => 0,
                1 => pos,
                2 => end,
                3 => placed
                    .get(inp.byte() as usize % placed.len().max(1))
                    .map_or(first, |r| r.offset),
                _ => inp.u64(),
            };
            let c = Checkpoint {
                physic_timestamp: BASE_TS,
                logics_timestamp: BASE_TS,
                index_timestamp: BASE_TS,
                flushed_offset: pick(inp),
                dispatched_offset: pick(inp),
                clean_end: if inp.byte() & 1 == 0 {
                    None
                } else {
                    Some(pick(inp))
                },
            };
            p.checkpoint.write_at(0, &c.encode()).ok()?;
        }
    }
    Some(p)
}

/// One consume queue, ("T", 0): entries pointing at placed records, raw, or fillers.
fn build_queue(inp: &mut Input<'_>, p: &mut Parts<'_>, placed: &[Placed]) -> Option<()> {
    let mut dir = p.table.create_dir("T", 0).ok()?;
    let files = 1 + u64::from(inp.byte() % 2);
    let first = u64::from(inp.byte() % 3) * CQ_FILE;
    let mut image = vec![0u8; (files * CQ_FILE) as usize];
    let mut next = 0usize;
    for i in 0..(files * CQ_ENTRIES) as usize {
        let e = &mut image[i * 20..i * 20 + 20];
        match inp.byte() % 5 {
            0 | 1 => {
                let Some(r) = placed.get(next) else { break };
                next += 1 + usize::from(inp.byte() % 2);
                e[..8].copy_from_slice(&r.offset.to_be_bytes());
                e[8..12].copy_from_slice(&r.size.to_be_bytes());
            }
            2 => e.copy_from_slice(&{
                let mut b = [0u8; 20];
                let raw = inp.bytes(20);
                b[..raw.len()].copy_from_slice(raw);
                b
            }),
            3 => e[8..12].copy_from_slice(&i32::MAX.to_be_bytes()),
            _ => break,
        }
    }
    for k in 0..files {
        let base = first + k * CQ_FILE;
        dir.create(base, CQ_FILE).ok()?;
        let from = (k * CQ_FILE) as usize;
        dir.media_mut(base)?
            .write_at(0, &image[from..from + CQ_FILE as usize])
            .ok()?;
    }
    p.table.insert_parked("T", 0, dir).ok()?;
    Some(())
}

/// Index files: the newest well-formed over placed records' keys, then patched with raw
/// bytes; sometimes an older raw file before it.
fn build_index(inp: &mut Input<'_>, p: &mut Parts<'_>, placed: &[Placed]) -> Option<()> {
    let size = INDEX.file_size() as usize;
    let slots_at = 40;
    let entries_at = slots_at + INDEX.slots as usize * 4;
    let base = file_stamp(BASE_TS);
    if inp.byte() & 1 != 0 {
        let mut old = vec![0u8; size];
        let raw = inp.bytes(size);
        old[..raw.len()].copy_from_slice(raw);
        p.index.create(base - 1, size as u64).ok()?;
        p.index.media_mut(base - 1)?.write_at(0, &old).ok()?;
    }
    let mut f = vec![0u8; size];
    let mut count = 1u32;
    let (mut begin, mut last) = (-1i64, -1i64);
    for r in placed {
        let Some(keys) = &r.keys else { continue };
        for k in properties::split_keys(keys) {
            if count >= INDEX.entries {
                break;
            }
            let hash = index_key_hash(&[&r.topic, "#", k]);
            let slot = slots_at + (hash as u32 % INDEX.slots) as usize * 4;
            let prev = u32::from_be_bytes(f[slot..slot + 4].try_into().unwrap());
            let e = entries_at + count as usize * 20;
            f[e..e + 4].copy_from_slice(&hash.to_be_bytes());
            f[e + 4..e + 12].copy_from_slice(&(r.offset as i64).to_be_bytes());
            f[e + 12..e + 16].copy_from_slice(&i32::from(inp.byte() % 4).to_be_bytes());
            f[e + 16..e + 20].copy_from_slice(&prev.to_be_bytes());
            f[slot..slot + 4].copy_from_slice(&count.to_be_bytes());
            if begin < 0 {
                begin = r.offset as i64;
            }
            last = r.offset as i64;
            count += 1;
        }
    }
    f[0..8].copy_from_slice(&BASE_TS.to_be_bytes());
    f[8..16].copy_from_slice(&BASE_TS.to_be_bytes());
    f[16..24].copy_from_slice(&begin.max(0).to_be_bytes());
    f[24..32].copy_from_slice(&last.to_be_bytes());
    f[32..36].copy_from_slice(&(count as i32 - 1).to_be_bytes());
    f[36..40].copy_from_slice(&(count as i32).to_be_bytes());
    for _ in 0..inp.byte() % 4 {
        let at = inp.u16() as usize % size;
        let len = (inp.byte() as usize % 24).min(size - at);
        let raw = inp.bytes(len);
        f[at..at + raw.len()].copy_from_slice(raw);
    }
    p.index.create(base, size as u64).ok()?;
    p.index.media_mut(base)?.write_at(0, &f).ok()?;
    Some(())
}

/// The history builder: a real store, real operations, then a clean close or a crash,
/// then rot.
pub(super) fn build_history<'a>(inp: &mut Input<'_>, p: Parts<'a>) -> Option<Parts<'a>> {
    let mut store = p.open(CONFIG, false).ok()?;
    let mut ts = BASE_TS;
    for n in 0..MAX_OPS {
        if inp.is_empty() {
            break;
        }
        ts += i64::from(inp.byte());
        let r = match inp.byte() % 10 {
            0..=3 => {
                let m = Msg::from_input(inp, n);
                store.put(&m.message(), ts).map(drop)
            }
            4 => {
                let mut batch: Vec<Msg> = (0..1 + inp.byte() % 3)
                    .map(|i| Msg::from_input(inp, n + i as usize))
                    .collect();
                let (topic, queue_id) = (batch[0].topic.clone(), batch[0].queue_id);
                for m in batch.iter_mut().skip(1) {
                    m.topic.clone_from(&topic);
                    m.queue_id = queue_id;
                }
                let msgs: Vec<MessageIn<'_>> = batch.iter().map(Msg::message).collect();
                store.put_batch(&msgs, ts, &mut |_| {})
            }
            5 => store.flush_log().map(drop),
            6 => store.dispatch(&mut [], &mut |_| {}).map(drop),
            7 => store
                .dispatch(&mut [], &mut |_| {})
                .and_then(|_| store.checkpoint()),
            8 => store
                .delete_before(u64::from(inp.byte()) * LOG_SEG / 2)
                .map(drop),
            _ => store.flush_log().map(drop),
        };
        if r.is_err() {
            break;
        }
    }
    let how = inp.byte();
    let mut p = if how & 1 == 0 {
        Parts::from_closed(store).ok()?
    } else {
        let mut p = Parts::from_store(store);
        p.for_each_media(|m| m.crash(crash_kind(inp, m.pending_writes())));
        p
    };
    // Rot: bits flipped in durable bytes.
    for _ in 0..inp.byte() % 4 {
        let (which, nth, at, bit) = (inp.byte(), inp.byte() as usize, inp.u16(), inp.byte());
        let media: Option<&mut FaultyMedia<'_>> = match which % 4 {
            0 => p.log.segments_mut().nth(nth % SEGS).map(|(_, m)| m),
            1 => p.index.segments_mut().nth(nth % SEGS).map(|(_, m)| m),
            2 => {
                let n = p.table.parked_mut().count().max(1);
                p.table
                    .parked_mut()
                    .nth(nth % n)
                    .and_then(|d| d.segments_mut().nth(nth / n % SEGS).map(|(_, m)| m))
            }
            _ => Some(&mut p.checkpoint),
        };
        if let Some(m) = media {
            let len = m.len().max(1);
            m.flip_bit(u64::from(at) % len, bit);
        }
    }
    Some(p)
}

fn crash_kind(inp: &mut Input<'_>, pending: usize) -> Crash {
    match inp.byte() % 4 {
        0 => Crash::Process,
        1 => Crash::DropUnflushed,
        _ => Crash::Torn {
            keep: inp.byte() as usize % (pending + 1),
            tear_at: inp.u16() as usize % 600,
        },
    }
}
