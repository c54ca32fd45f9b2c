//! QueryRoute and QueryAssignment (RocketMQ's `RouteActivity`), from the name servers'
//! route with every broker's address made its gRPC endpoint.

use tern_shell::acl::rules::perm;
use tern_shell::body::{BrokerData, QueueData, TopicRouteData};

use super::{Inner, group_need, topic_need, validate_group, validate_topic};
use crate::convert::accepted_types;
use crate::meta::CallCtx;
use crate::pb::*;
use crate::session::Session;
use crate::status::{ok, status};

const PERM_READ: i32 = 4;
const PERM_WRITE: i32 = 2;

/// `broker`'s gRPC endpoint: its master's host, the endpoint's port.
fn endpoints(b: &BrokerData, port: u16) -> Option<Endpoints> {
    let addr = b.broker_addrs.0.get(&0)?;
    let host = addr.rsplit_once(':').map_or(addr.as_str(), |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let scheme = match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => AddressScheme::IPv4,
        Ok(std::net::IpAddr::V6(_)) => AddressScheme::IPv6,
        Err(_) => AddressScheme::DomainName,
    };
    Some(Endpoints {
        scheme: scheme as i32,
        addresses: vec![Address {
            host: host.to_owned(),
            port: i32::from(port),
        }],
    })
}

fn permission(p: i32) -> Permission {
    match (p & PERM_READ != 0, p & PERM_WRITE != 0) {
        (true, true) => Permission::ReadWrite,
        (true, false) => Permission::Read,
        (false, true) => Permission::Write,
        (false, false) => Permission::None,
    }
}

fn queue(topic: &str, id: i32, p: Permission, broker: &Broker, types: &[i32]) -> MessageQueue {
    MessageQueue {
        topic: Some(Resource {
            resource_namespace: String::new(),
            name: topic.to_owned(),
        }),
        id,
        permission: p as i32,
        broker: Some(broker.clone()),
        accept_message_types: types.to_vec(),
    }
}

/// A broker's queues as the proxy lists them (`genMessageQueueFromQueueData`): the read-only
/// ones first, then the write-only ones, then those both readable and writable.
fn queues(topic: &str, qd: &QueueData, broker: &Broker, types: &[i32]) -> Vec<MessageQueue> {
    let (readable, writable) = (qd.perm & PERM_READ != 0, qd.perm & PERM_WRITE != 0);
    let (r, w, rw) = match (readable, writable) {
        (true, true) => {
            let rw = qd.read_queue_nums.min(qd.write_queue_nums);
            (qd.read_queue_nums - rw, qd.write_queue_nums - rw, rw)
        }
        (true, false) => (qd.read_queue_nums, 0, 0),
        (false, true) => (0, qd.write_queue_nums, 0),
        (false, false) => (0, 0, 0),
    };
    let kinds = [
        (r, Permission::Read),
        (w, Permission::Write),
        (rw, Permission::ReadWrite),
    ];
    let mut out = Vec::new();
    let mut id = 0;
    for (n, p) in kinds {
        for _ in 0..n.clamp(0, 1024) {
            out.push(queue(topic, id, p, broker, types));
            id += 1;
        }
    }
    if out.is_empty() {
        out.push(queue(topic, 0, Permission::None, broker, types));
    }
    out
}

/// The route's brokers with the endpoint a client reaches each through, by name: in LOCAL
/// mode each broker's own (its host, this port); in CLUSTER mode the one the client
/// dialled, for every broker (RocketMQ's `ClusterTopicRouteService`).
fn brokers(
    route: &TopicRouteData,
    local: bool,
    port: u16,
    dialled: Option<&Endpoints>,
) -> Result<Vec<(String, Broker)>, Status> {
    let dialled = match (local, dialled) {
        (true, _) => None,
        (false, Some(e)) if !e.addresses.is_empty() => Some(e),
        (false, _) => {
            return Err(status(
                Code::BadRequest,
                "the request names no endpoints: a proxy in CLUSTER mode answers with \
                 the endpoints the client dialled",
            ));
        }
    };
    Ok(route
        .broker_datas
        .iter()
        .filter_map(|b| {
            let endpoints = match dialled {
                Some(e) => e.clone(),
                None => endpoints(b, port)?,
            };
            Some((
                b.broker_name.clone(),
                Broker {
                    name: b.broker_name.clone(),
                    id: 0,
                    endpoints: Some(endpoints),
                },
            ))
        })
        .collect())
}

impl Inner {
    /// The message types `topic` accepts (its `message.type`).
    async fn topic_types(&self, topic: &str) -> Vec<i32> {
        accepted_types(self.backend.topic_message_type(topic).await.as_deref())
    }

    /// [`brokers`] for this endpoint's mode.
    fn route_brokers(
        &self,
        route: &TopicRouteData,
        dialled: Option<&Endpoints>,
    ) -> Result<Vec<(String, Broker)>, Status> {
        let local = self.backend.local_broker().is_some();
        brokers(route, local, self.grpc_port, dialled)
    }
}

pub(super) async fn query_route(
    inner: &Inner,
    ctx: &CallCtx,
    session: &Session,
    req: QueryRouteRequest,
) -> Result<QueryRouteResponse, Status> {
    let topic = validate_topic(req.topic.as_ref())?;
    inner.authorize(ctx, &[topic_need(&topic, perm::ANY)])?;
    let route = session
        .instance
        .fetch_route(&topic)
        .await
        .map_err(|e| crate::status::from_client_error(&e))?;
    let types = inner.topic_types(&topic).await;
    let brokers = inner.route_brokers(&route, req.endpoints.as_ref())?;
    let mut message_queues = Vec::new();
    for qd in &route.queue_datas {
        if let Some((_, b)) = brokers.iter().find(|(n, _)| *n == qd.broker_name) {
            message_queues.extend(queues(&topic, qd, b, &types));
        }
    }
    if message_queues.is_empty() {
        return Err(status(
            Code::TopicNotFound,
            format!("topic {topic} has no queues"),
        ));
    }
    Ok(QueryRouteResponse {
        status: Some(ok()),
        message_queues,
    })
}

pub(super) async fn query_assignment(
    inner: &Inner,
    ctx: &CallCtx,
    session: &Session,
    req: QueryAssignmentRequest,
) -> Result<QueryAssignmentResponse, Status> {
    let topic = validate_topic(req.topic.as_ref())?;
    let group = validate_group(req.group.as_ref())?;
    inner.authorize(ctx, &[topic_need(&topic, perm::SUB), group_need(&group)])?;
    let route = inner.route(session, &topic).await?;
    let fifo = inner
        .backend
        .group_policy(&group)
        .await
        .unwrap_or_default()
        .orderly;
    let types = inner.topic_types(&topic).await;
    let brokers = inner.route_brokers(&route, req.endpoints.as_ref())?;
    let mut assignments = Vec::new();
    for qd in route.queue_datas.iter().filter(|q| q.perm & PERM_READ != 0) {
        let Some((_, b)) = brokers.iter().find(|(n, _)| *n == qd.broker_name) else {
            continue;
        };
        let p = permission(qd.perm);
        if fifo {
            for id in 0..qd.read_queue_nums.clamp(0, 1024) {
                assignments.push(Assignment {
                    message_queue: Some(queue(&topic, id, p, b, &types)),
                });
            }
        } else {
            // One assignment per broker: a POP of all its queues.
            assignments.push(Assignment {
                message_queue: Some(queue(&topic, -1, p, b, &types)),
            });
        }
    }
    if assignments.is_empty() {
        return Err(status(Code::Forbidden, "no readable queue"));
    }
    Ok(QueryAssignmentResponse {
        status: Some(ok()),
        assignments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qd(r: i32, w: i32, perm: i32) -> QueueData {
        QueueData {
            broker_name: "b".into(),
            read_queue_nums: r,
            write_queue_nums: w,
            perm,
            topic_sys_flag: 0,
        }
    }

    #[test]
    fn queues_are_listed_as_the_proxy_lists_them() {
        let b = Broker::default();
        let ps = |q: &QueueData| -> Vec<(i32, i32)> {
            queues("T", q, &b, &[])
                .iter()
                .map(|m| (m.id, m.permission))
                .collect()
        };
        let rw = Permission::ReadWrite as i32;
        assert_eq!(ps(&qd(4, 4, 6)), vec![(0, rw), (1, rw), (2, rw), (3, rw)]);
        assert_eq!(
            ps(&qd(3, 1, 6)),
            vec![
                (0, Permission::Read as i32),
                (1, Permission::Read as i32),
                (2, rw)
            ]
        );
        assert_eq!(
            ps(&qd(2, 2, 2)),
            vec![(0, Permission::Write as i32), (1, Permission::Write as i32)]
        );
        assert_eq!(ps(&qd(2, 2, 0)), vec![(0, Permission::None as i32)]);
    }
}
