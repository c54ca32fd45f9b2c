//! What a broker in controller mode knows of its broker-set: its controller-assigned id,
//! the master the controller named and its epoch, the SyncStateSet, and the epoch file.
//! One lock each, behind named operations; the role itself is [`crate::role::RoleCell`].

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use event_listener::Event;
use tern_engine_fs::meta;
use tern_shell::sync::MutexExt;

use super::epoch::{EpochEntry, EpochError, EpochFile};
use super::error::{EpochsError, IdentityError};

/// The identity file's name under the store root (`storePathBrokerIdentity`'s default).
pub const IDENTITY_FILE: &str = "brokerIdentity";
/// The identity applied for but not yet confirmed by the controller.
pub const TEMP_IDENTITY_FILE: &str = "brokerIdentity-temp";

/// The master the controller named, with the epochs it answered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Known {
    /// The master's controller id.
    pub master_id: Option<i64>,
    /// Its remoting address.
    pub master_addr: Option<String>,
    /// The master epoch.
    pub master_epoch: i32,
    /// The SyncStateSet (controller ids), as last confirmed by the controller.
    pub sync_state_set: Vec<i64>,
    /// Its epoch.
    pub sync_state_set_epoch: i32,
}

/// The broker-set as this replica knows it.
#[derive(Debug)]
pub struct Replica {
    root: PathBuf,
    /// The id the controller assigned (None until registered).
    broker_id: Mutex<Option<i64>>,
    known: Mutex<Known>,
    /// A SyncStateSet this master proposed and the controller has not answered yet:
    /// sends wait for its members too (RocketMQ's union while synchronizing).
    proposed: Mutex<Vec<i64>>,
    /// `None` until the manager learned a role: a fenced broker neither registers with
    /// the name servers nor takes sends.
    fenced: std::sync::atomic::AtomicBool,
    epochs: Mutex<EpochFile>,
    /// Wakes the manager: the controller says the role changed (NOTIFY_BROKER_ROLE_CHANGED).
    pub(crate) notified: Event,
    /// Signalled when the SyncStateSet changes (a send waiting for its members looks again).
    pub(crate) set_changed: Event,
}

impl Replica {
    /// Opens the epoch file under `root`; the broker starts fenced.
    pub fn open(root: &Path) -> Result<Self, EpochError> {
        Ok(Self {
            root: root.to_path_buf(),
            broker_id: Mutex::new(None),
            known: Mutex::new(Known::default()),
            proposed: Mutex::new(Vec::new()),
            fenced: std::sync::atomic::AtomicBool::new(true),
            epochs: Mutex::new(EpochFile::open(root)?),
            notified: Event::new(),
            set_changed: Event::new(),
        })
    }

    /// The controller-assigned id, once registered.
    pub fn broker_id(&self) -> Option<i64> {
        *self.broker_id.guard()
    }

    pub(crate) fn set_broker_id(&self, id: i64) {
        *self.broker_id.guard() = Some(id);
    }

    /// What the controller said last.
    pub fn known(&self) -> Known {
        self.known.guard().clone()
    }

    /// Adopts the controller's answer; wakes senders waiting on the set when it changed.
    /// Within one master epoch a set older than the one known is not taken back (an
    /// answer read before an ALTER_SYNC_STATE_SET this master made and adopted).
    pub(crate) fn set_known(&self, mut k: Known) {
        let mut cur = self.known.guard();
        if k.master_epoch == cur.master_epoch && k.sync_state_set_epoch < cur.sync_state_set_epoch {
            k.sync_state_set = cur.sync_state_set.clone();
            k.sync_state_set_epoch = cur.sync_state_set_epoch;
        }
        let set_changed = cur.sync_state_set != k.sync_state_set;
        *cur = k;
        drop(cur);
        if set_changed {
            self.set_changed.notify(usize::MAX);
        }
    }

    /// Adopts a SyncStateSet the controller confirmed (an ALTER_SYNC_STATE_SET answer),
    /// unless a newer one is known.
    pub(crate) fn set_sync_state_set(&self, set: Vec<i64>, epoch: i32) {
        let mut cur = self.known.guard();
        if epoch < cur.sync_state_set_epoch {
            return;
        }
        let changed = cur.sync_state_set != set;
        cur.sync_state_set = set;
        cur.sync_state_set_epoch = epoch;
        drop(cur);
        if changed {
            self.set_changed.notify(usize::MAX);
        }
    }

    /// Records a proposed set (empty: none pending).
    pub(crate) fn set_proposed(&self, set: Vec<i64>) {
        *self.proposed.guard() = set;
    }

    /// The members a send waits for: the confirmed set and any proposed one.
    pub fn wait_set(&self) -> Vec<i64> {
        let mut set = self.known.guard().sync_state_set.clone();
        for id in self.proposed.guard().iter() {
            if !set.contains(id) {
                set.push(*id);
            }
        }
        set
    }

    /// RocketMQ's `inSyncReplicasNums`: the SyncStateSet's size, or while a change is
    /// proposed the larger of it and the proposal; never below 1 (the master itself).
    pub fn in_sync_replicas(&self) -> usize {
        let known = self.known.guard().sync_state_set.len();
        known.max(self.proposed.guard().len()).max(1)
    }

    /// True until the manager learned a role.
    pub fn is_fenced(&self) -> bool {
        self.fenced.load(std::sync::atomic::Ordering::Acquire)
    }

    pub(crate) fn unfence(&self) {
        self.fenced
            .store(false, std::sync::atomic::Ordering::Release);
    }

    /// The epoch file's entries.
    pub fn epochs(&self) -> Vec<EpochEntry> {
        self.epochs.guard().entries().to_vec()
    }

    /// The last epoch this replica has seen (0 for none).
    pub fn last_epoch(&self) -> i32 {
        self.epochs.guard().last().map_or(0, |e| e.epoch)
    }

    /// A new term starts at `log_end` (this broker became its master): entries at or
    /// past the end are dropped, the entry appended and the file written durably.
    /// Blocking (an fsync): call from a blocking thread.
    pub(crate) fn begin_term(&self, epoch: i32, log_end: u64) -> Result<(), EpochsError> {
        let mut f = self.epochs.guard();
        let end = log_end as i64;
        f.truncate_suffix(end);
        f.begin(epoch, end).map_err(EpochsError::Begin)?;
        f.save().map_err(EpochsError::Save)
    }

    /// Takes the master's entries as this replica's (its log agrees with the master's up
    /// to where it ends). Later terms are kept even past this replica's end: the stream
    /// crosses their starts, and a term left out would make this log look like an older
    /// term's past it. Blocking (an fsync).
    pub(crate) fn adopt_master_epochs(&self, master: &[EpochEntry]) -> Result<(), EpochsError> {
        let ascending = master
            .windows(2)
            .all(|w| w[0].epoch < w[1].epoch && w[0].start_offset <= w[1].start_offset);
        if !ascending || master.first().is_some_and(|e| e.start_offset < 0) {
            return Err(EpochsError::MasterOutOfOrder(master.to_vec()));
        }
        let mut f = self.epochs.guard();
        // A term this replica began (promoted meanwhile) is never replaced by an older
        // master's list.
        let ours = f.last().map_or(0, |e| e.epoch);
        let theirs = master.last().map_or(0, |e| e.epoch);
        if ours > theirs {
            return Err(EpochsError::NewerThanMaster { ours, theirs });
        }
        f.replace(master);
        f.save().map_err(EpochsError::Save)
    }

    /// The identity recorded by a previous registration: `cluster#name#id`.
    pub fn read_identity(&self, cluster: &str, name: &str) -> Result<Option<i64>, IdentityError> {
        let path = self.root.join(IDENTITY_FILE);
        let Some(text) = read_small(&path)? else {
            return Ok(None);
        };
        let parts: Vec<&str> = text.trim().split('#').collect();
        match parts.as_slice() {
            [c, n, id] if *c == cluster && *n == name => {
                id.parse::<i64>()
                    .map(Some)
                    .map_err(|_| IdentityError::BadId {
                        id: (*id).to_owned(),
                        path,
                    })
            }
            [c, n, _] => Err(IdentityError::OtherBroker {
                path,
                found: ((*c).to_owned(), (*n).to_owned()),
                ours: (cluster.to_owned(), name.to_owned()),
            }),
            _ => Err(IdentityError::Malformed { path }),
        }
    }

    /// The id applied for before a crash: `(id, check code)` from
    /// `cluster#name#id#addr;timestamp`.
    pub fn read_temp_identity(
        &self,
        cluster: &str,
        name: &str,
    ) -> Result<Option<(i64, String)>, IdentityError> {
        let path = self.root.join(TEMP_IDENTITY_FILE);
        let Some(text) = read_small(&path)? else {
            return Ok(None);
        };
        let parts: Vec<&str> = text.trim().splitn(4, '#').collect();
        match parts.as_slice() {
            [c, n, id, code] if *c == cluster && *n == name => match id.parse::<i64>() {
                Ok(id) => Ok(Some((id, (*code).to_owned()))),
                Err(_) => Err(IdentityError::BadId {
                    id: (*id).to_owned(),
                    path,
                }),
            },
            _ => Err(IdentityError::NotThisBrokers { path }),
        }
    }

    /// Records an id applied for (before the controller confirms it). Blocking.
    pub fn write_temp_identity(
        &self,
        cluster: &str,
        name: &str,
        id: i64,
        code: &str,
    ) -> Result<(), IdentityError> {
        let path = self.root.join(TEMP_IDENTITY_FILE);
        meta::replace_file(&path, format!("{cluster}#{name}#{id}#{code}").as_bytes())
            .map_err(|error| IdentityError::Write { path, error })
    }

    /// Records the confirmed id and drops the temporary file. Blocking.
    pub fn confirm_identity(
        &self,
        cluster: &str,
        name: &str,
        id: i64,
    ) -> Result<(), IdentityError> {
        let path = self.root.join(IDENTITY_FILE);
        meta::replace_file(&path, format!("{cluster}#{name}#{id}").as_bytes())
            .map_err(|error| IdentityError::Write { path, error })?;
        self.drop_temp_identity();
        Ok(())
    }

    /// Forgets an application the controller refused.
    pub fn drop_temp_identity(&self) {
        let _ = std::fs::remove_file(self.root.join(TEMP_IDENTITY_FILE));
    }
}

/// A small text file, or None when it does not exist.
fn read_small(path: &Path) -> Result<Option<String>, IdentityError> {
    match std::fs::read(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(IdentityError::Read {
            path: path.to_path_buf(),
            error,
        }),
        Ok(b) if b.len() > 4096 => Err(IdentityError::TooLarge {
            path: path.to_path_buf(),
        }),
        Ok(b) => Ok(Some(String::from_utf8_lossy(&b).into_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_round_trip_and_refuse_another_brokers_store() {
        let dir = tempfile::tempdir().unwrap();
        let r = Replica::open(dir.path()).unwrap();
        assert_eq!(r.read_identity("C", "b").unwrap(), None);
        r.write_temp_identity("C", "b", 3, "127.0.0.1:10911;1700000000000")
            .unwrap();
        assert_eq!(
            r.read_temp_identity("C", "b").unwrap(),
            Some((3, "127.0.0.1:10911;1700000000000".to_owned()))
        );
        r.confirm_identity("C", "b", 3).unwrap();
        assert_eq!(r.read_temp_identity("C", "b").unwrap(), None);
        assert_eq!(r.read_identity("C", "b").unwrap(), Some(3));
        assert_eq!(
            std::fs::read_to_string(dir.path().join(IDENTITY_FILE)).unwrap(),
            "C#b#3"
        );
        assert!(
            r.read_identity("C", "other")
                .unwrap_err()
                .to_string()
                .contains("another")
        );
    }

    #[test]
    fn a_term_begins_at_the_log_end_and_drops_the_terms_past_it() {
        let dir = tempfile::tempdir().unwrap();
        let r = Replica::open(dir.path()).unwrap();
        r.begin_term(1, 0).unwrap();
        r.begin_term(2, 500).unwrap();
        assert_eq!(r.last_epoch(), 2);
        // Epochs only grow.
        assert!(r.begin_term(2, 900).is_err());
        let master = [
            EpochEntry {
                epoch: 1,
                start_offset: 0,
            },
            EpochEntry {
                epoch: 3,
                start_offset: 400,
            },
            EpochEntry {
                epoch: 4,
                start_offset: 800,
            },
        ];
        // A list out of order is refused, and said as the file writes it.
        let backwards = [master[1], master[0]];
        assert_eq!(
            r.adopt_master_epochs(&backwards).unwrap_err().to_string(),
            "the master's epochs are out of order: 3-400 1-0"
        );
        r.adopt_master_epochs(&master).unwrap();
        assert_eq!(r.epochs(), master.to_vec());
        // Promoted at 600: the term that started past its end is dropped.
        r.begin_term(5, 600).unwrap();
        let again = Replica::open(dir.path()).unwrap();
        assert_eq!(
            again.epochs(),
            vec![
                master[0],
                master[1],
                EpochEntry {
                    epoch: 5,
                    start_offset: 600
                }
            ]
        );
    }
}
