//! The 5.x gRPC endpoint of a real `tern-broker --standalone`, driven with a tonic client
//! for what the Python 5.x client (interop_grpc.rs) does not reach: the metadata rules,
//! Telemetry's stream errors, the pull-consumer RPCs RocketMQ's proxy leaves out
//! (PullMessage, UpdateOffset, GetOffset, QueryOffset), and ACL over the 5.x signature.

#![cfg(feature = "grpc")]

use crate::common;

use common::*;
use tern_proxy::pb::messaging_service_client::MessagingServiceClient;
use tern_proxy::pb::*;
use tern_shell::ResponseCode;
use tonic::transport::Channel;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn resource(n: &str) -> Resource {
    Resource {
        resource_namespace: String::new(),
        name: n.into(),
    }
}

/// An account's 5.x signature: hex HMAC-SHA1 of the date-time under the secret key.
fn sign(secret: &str, date_time: &str) -> String {
    tern_shell::acl::tag(secret, &[date_time.as_bytes()])
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

struct Caller {
    c: MessagingServiceClient<Channel>,
    client_id: Option<String>,
    account: Option<(String, String)>,
}

impl Caller {
    async fn new(addr: &str, client_id: &str) -> Caller {
        Caller {
            c: MessagingServiceClient::connect(format!("http://{addr}"))
                .await
                .unwrap(),
            client_id: Some(client_id.into()),
            account: None,
        }
    }

    fn req<T>(&self, m: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(m);
        let md = r.metadata_mut();
        if let Some(id) = &self.client_id {
            md.insert("x-mq-client-id", id.parse().unwrap());
        }
        md.insert("x-mq-language", "RUST".parse().unwrap());
        let date = "20261202T010203Z";
        md.insert("x-mq-date-time", date.parse().unwrap());
        if let Some((ak, sk)) = &self.account {
            let auth = format!(
                "MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={}",
                sign(sk, date)
            );
            md.insert("authorization", auth.parse().unwrap());
        }
        r
    }

    /// QueryRoute of `topic`.
    async fn route(&mut self, topic: &str) -> QueryRouteResponse {
        let req = self.req(QueryRouteRequest {
            topic: Some(resource(topic)),
            endpoints: None,
        });
        self.c.query_route(req).await.unwrap().into_inner()
    }

    /// QueryOffset of `queue` by `policy` (`ts` for a timestamp).
    async fn query_offset(
        &mut self,
        queue: &MessageQueue,
        policy: QueryOffsetPolicy,
        ts: Option<prost_types::Timestamp>,
    ) -> QueryOffsetResponse {
        let req = self.req(QueryOffsetRequest {
            message_queue: Some(queue.clone()),
            query_offset_policy: policy as i32,
            timestamp: ts,
        });
        self.c.query_offset(req).await.unwrap().into_inner()
    }

    async fn send(&mut self, topic: &str, body: &[u8], id: &str) -> SendMessageResponse {
        let m = Message {
            topic: Some(resource(topic)),
            user_properties: [("k".to_string(), "v".to_string())].into(),
            system_properties: Some(SystemProperties {
                tag: Some("TagA".into()),
                message_id: id.into(),
                message_type: MessageType::Normal as i32,
                ..Default::default()
            }),
            body: body.to_vec(),
        };
        let req = self.req(SendMessageRequest { messages: vec![m] });
        self.c.send_message(req).await.unwrap().into_inner()
    }
}

fn code(s: &Option<Status>) -> Code {
    Code::try_from(s.as_ref().expect("a status").code).unwrap()
}

#[test]
fn metadata_and_telemetry_errors_are_answered_as_the_proxy_answers_them() {
    let (_dir, broker) = start("");
    let addr = broker.grpc.clone().expect("gRPC endpoint");
    rt().block_on(async {
        let mut anon = Caller::new(&addr, "x").await;
        anon.client_id = None;
        let r = anon.route("T").await;
        assert_eq!(code(&r.status), Code::ClientIdRequired);

        let mut c = Caller::new(&addr, "client-1").await;
        let r = c.route("NoSuchTopic").await;
        assert_eq!(code(&r.status), Code::TopicNotFound, "{r:?}");
        let r = c.route("rmq_sys_anything").await;
        assert_eq!(code(&r.status), Code::IllegalTopic);

        // A heartbeat before any settings: the client is not known yet.
        let r =
            c.c.heartbeat(c.req(HeartbeatRequest {
                group: None,
                client_type: ClientType::Producer as i32,
            }))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(code(&r.status), Code::UnrecognizedClientType);

        // Settings with neither publishing nor subscription fail the stream itself.
        let empty = TelemetryCommand {
            status: None,
            command: Some(telemetry_command::Command::Settings(Settings {
                client_type: Some(ClientType::Producer as i32),
                ..Default::default()
            })),
        };
        let mut answers =
            c.c.telemetry(c.req(tokio_stream::iter(vec![empty])))
                .await
                .unwrap()
                .into_inner();
        let err = answers.message().await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    });
}

#[test]
fn pull_consumer_rpcs_read_queues_and_keep_offsets() {
    let (_dir, broker) = start("");
    let addr = broker.grpc.clone().expect("gRPC endpoint");
    rt().block_on(async {
        create_topic(&Client::connect(&broker.addr).await, "PullT", 1).await;
        let mut c = Caller::new(&addr, "puller").await;
        for i in 0..3 {
            let r = c
                .send("PullT", format!("m{i}").as_bytes(), &format!("ID{i}"))
                .await;
            assert_eq!(code(&r.status), Code::Ok, "{r:?}");
            assert_eq!(r.entries[0].message_id, format!("ID{i}"));
            assert_eq!(r.entries[0].offset, i64::from(i));
        }
        let queue = MessageQueue {
            topic: Some(resource("PullT")),
            id: 0,
            permission: Permission::ReadWrite as i32,
            broker: Some(Broker {
                name: "broker-a".into(),
                id: 0,
                endpoints: None,
            }),
            accept_message_types: vec![],
        };
        let r = c.query_offset(&queue, QueryOffsetPolicy::End, None).await;
        assert_eq!((code(&r.status), r.offset), (Code::Ok, 3));
        let r = c
            .query_offset(&queue, QueryOffsetPolicy::Beginning, None)
            .await;
        assert_eq!((code(&r.status), r.offset), (Code::Ok, 0));
        let future = prost_types::Timestamp {
            seconds: now_ms() / 1000 + 3600,
            nanos: 0,
        };
        let r = c
            .query_offset(&queue, QueryOffsetPolicy::Timestamp, Some(future))
            .await;
        assert_eq!((code(&r.status), r.offset), (Code::Ok, 3));

        let pull = PullMessageRequest {
            group: Some(resource("PullG")),
            message_queue: Some(queue.clone()),
            offset: 1,
            batch_size: 10,
            filter_expression: Some(FilterExpression {
                r#type: FilterType::Tag as i32,
                expression: "TagA".into(),
            }),
            long_polling_timeout: None,
        };
        let mut frames =
            c.c.pull_message(c.req(pull.clone()))
                .await
                .unwrap()
                .into_inner();
        let (mut status, mut bodies, mut next) = (None, Vec::new(), None);
        while let Some(f) = frames.message().await.unwrap() {
            match f.content.unwrap() {
                pull_message_response::Content::Status(s) => status = Some(s),
                pull_message_response::Content::Message(m) => {
                    assert_eq!(m.user_properties["k"], "v");
                    bodies.push(String::from_utf8(m.body).unwrap());
                }
                pull_message_response::Content::NextOffset(n) => next = Some(n),
            }
        }
        assert_eq!(code(&status), Code::Ok);
        assert_eq!(bodies, ["m1", "m2"]);
        assert_eq!(next, Some(3));

        // No offset yet, then the one committed.
        let get = GetOffsetRequest {
            group: Some(resource("PullG")),
            message_queue: Some(queue.clone()),
        };
        let r =
            c.c.get_offset(c.req(get.clone()))
                .await
                .unwrap()
                .into_inner();
        assert_eq!(code(&r.status), Code::OffsetNotFound, "{r:?}");
        let r =
            c.c.update_offset(c.req(UpdateOffsetRequest {
                group: Some(resource("PullG")),
                message_queue: Some(queue.clone()),
                offset: 2,
            }))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(code(&r.status), Code::Ok);
        let r = c.c.get_offset(c.req(get)).await.unwrap().into_inner();
        assert_eq!((code(&r.status), r.offset), (Code::Ok, 2));

        // Past the end: nothing, and where to go on.
        let mut frames =
            c.c.pull_message(c.req(PullMessageRequest { offset: 3, ..pull }))
                .await
                .unwrap()
                .into_inner();
        let first = frames.message().await.unwrap().unwrap();
        match first.content.unwrap() {
            pull_message_response::Content::Status(s) => {
                assert_eq!(Code::try_from(s.code).unwrap(), Code::MessageNotFound)
            }
            other => panic!("{other:?}"),
        }
    });
}

const RULES: &str = "\
accounts:
  - accessKey: writer
    secretKey: writer_secret
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - AclT=PUB|SUB
  - accessKey: reader
    secretKey: reader_secret
    admin: false
    defaultTopicPerm: DENY
    topicPerms:
      - AclT=SUB
  - accessKey: tern_admin
    secretKey: 12345678
    admin: true
";

#[test]
fn acl_checks_the_5x_signature_and_each_resource() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("plain_acl.yml");
    std::fs::write(&rules, RULES).unwrap();
    let conf = write_conf(
        dir.path(),
        &format!(
            "aclEnable=true\nplainAclFile={}\ninnerClientAuthenticationCredentials={{\"accessKey\":\"tern_admin\",\"secretKey\":\"12345678\"}}\n",
            rules.display()
        ),
    );
    let broker = BrokerProc::standalone(dir.path(), &conf);
    let addr = broker.grpc.clone().expect("gRPC endpoint");
    rt().block_on(async {
        let c = Client::connect(&broker.addr).await;
        let mut create = create_topic_req("AclT", 2);
        tern_shell::acl::SessionCredentials::new("tern_admin", "12345678").sign(&mut create);
        assert_eq!(c.call(create).await.response_code(), ResponseCode::Success);

        let mut writer = Caller::new(&addr, "w").await;
        writer.account = Some(("writer".into(), "writer_secret".into()));
        let r = writer.send("AclT", b"x", "A1").await;
        assert_eq!(code(&r.status), Code::Ok, "{r:?}");

        let mut forger = Caller::new(&addr, "f").await;
        forger.account = Some(("writer".into(), "not_the_secret".into()));
        let r = forger.send("AclT", b"x", "A2").await;
        assert_eq!(code(&r.status), Code::Unauthorized, "{r:?}");
        assert!(r.status.unwrap().message.contains("signature"));

        let mut nobody = Caller::new(&addr, "n").await;
        let r = nobody.send("AclT", b"x", "A3").await;
        assert_eq!(code(&r.status), Code::Unauthorized);

        let mut reader = Caller::new(&addr, "r").await;
        reader.account = Some(("reader".into(), "reader_secret".into()));
        let r = reader.send("AclT", b"x", "A4").await;
        assert_eq!(code(&r.status), Code::Unauthorized, "{r:?}");
        // The reader may look the topic up.
        let r = reader.route("AclT").await;
        assert_eq!(code(&r.status), Code::Ok, "{r:?}");
        assert_eq!(r.message_queues.len(), 2);
        let port = addr.rsplit_once(':').unwrap().1.parse::<i32>().unwrap();
        let ep = r.message_queues[0]
            .broker
            .as_ref()
            .unwrap()
            .endpoints
            .as_ref()
            .unwrap();
        assert_eq!(ep.addresses[0].port, port, "routes name the gRPC endpoint");
    });
}

/// The broker's questions about a 5.x consumer reach it through the endpoint:
/// CONSUME_MESSAGE_DIRECTLY (`mqadmin consumeMessage -d`) becomes a VerifyMessageCommand
/// on the client's Telemetry stream and the client's VerifyMessageResult becomes the
/// answer (CR_SUCCESS, CR_LATER), and GET_CONSUMER_RUNNING_INFO is answered from the
/// client's settings.
#[test]
fn verify_message_and_running_info_reach_the_5x_client() {
    use tern_shell::body::{ConsumeMessageDirectlyResult, ConsumerConnection, from_json};
    use tern_shell::headers::{
        ConsumeMessageDirectlyResultRequestHeader, ConsumerGroupRequestHeader,
        GetConsumerRunningInfoRequestHeader,
    };
    use tern_shell::{RemotingCommand, RequestCode};

    let (_dir, broker) = start("");
    let addr = broker.grpc.clone().expect("gRPC endpoint");
    let (topic, group) = ("VerifyT", "VerifyG");
    rt().block_on(async {
        let admin = Client::connect(&broker.addr).await;
        create_topic(&admin, topic, 1).await;
        let mut c = Caller::new(&addr, "verify-client").await;
        // The client's Telemetry: its settings, then its answers as the test writes them.
        let (to_endpoint, outgoing) = tokio::sync::mpsc::channel::<TelemetryCommand>(8);
        let settings = TelemetryCommand {
            status: None,
            command: Some(telemetry_command::Command::Settings(Settings {
                client_type: Some(ClientType::PushConsumer as i32),
                pub_sub: Some(settings::PubSub::Subscription(Subscription {
                    group: Some(resource(group)),
                    subscriptions: vec![SubscriptionEntry {
                        topic: Some(resource(topic)),
                        expression: Some(FilterExpression {
                            r#type: FilterType::Tag as i32,
                            expression: "*".into(),
                        }),
                    }],
                    ..Default::default()
                })),
                ..Default::default()
            })),
        };
        to_endpoint.send(settings).await.unwrap();
        let mut commands =
            c.c.telemetry(c.req(tokio_stream::wrappers::ReceiverStream::new(outgoing)))
                .await
                .unwrap()
                .into_inner();
        let first = commands
            .message()
            .await
            .unwrap()
            .expect("settings answered");
        assert!(
            matches!(first.command, Some(telemetry_command::Command::Settings(_))),
            "{first:?}"
        );

        // The client as the broker lists it (the endpoint heartbeats in the background).
        let mut client_id = String::new();
        tern_testkit::wait_until(
            "the 5.x consumer never registered",
            std::time::Duration::from_secs(10),
            async || {
                let resp = admin
                    .call(RemotingCommand::request(
                        RequestCode::GetConsumerConnectionList,
                        &ConsumerGroupRequestHeader {
                            consumer_group: group.into(),
                        },
                    ))
                    .await;
                if resp.response_code() == ResponseCode::Success {
                    let conns: ConsumerConnection = from_json(&resp.body).unwrap();
                    if let Some(conn) = conns.connection_set.first() {
                        client_id = conn.client_id.clone();
                        return true;
                    }
                }
                false
            },
        )
        .await;

        let info = admin
            .call(RemotingCommand::request(
                RequestCode::GetConsumerRunningInfo,
                &GetConsumerRunningInfoRequestHeader {
                    consumer_group: group.into(),
                    client_id: client_id.clone(),
                    jstack_enable: Some(false),
                },
            ))
            .await;
        expect_code(&info, ResponseCode::Success);
        let info: serde_json::Value = serde_json::from_slice(&info.body).unwrap();
        assert_eq!(info["properties"]["PROP_CLIENT_PROTOCOL"], "gRPC v2");
        assert_eq!(info["properties"]["PROP_CONSUME_TYPE"], "CONSUME_PASSIVELY");

        let sent = send_ok(&admin, send_v2(&msg(topic, b"verify me", &[]), 0)).await;
        // The client answers OK, then FAILED_TO_CONSUME_MESSAGE.
        for (answer, want) in [
            (Code::Ok, "CR_SUCCESS"),
            (Code::FailedToConsumeMessage, "CR_LATER"),
        ] {
            let direct = RemotingCommand::request(
                RequestCode::ConsumeMessageDirectly,
                &ConsumeMessageDirectlyResultRequestHeader {
                    consumer_group: group.into(),
                    client_id: Some(client_id.clone()),
                    msg_id: Some(sent.msg_id.clone()),
                    broker_name: None,
                    topic: Some(topic.into()),
                },
            );
            let call = admin.call(direct);
            let client = async {
                let cmd = commands.message().await.unwrap().expect("a command");
                let Some(telemetry_command::Command::VerifyMessageCommand(v)) = cmd.command else {
                    panic!("expected a VerifyMessageCommand, got {cmd:?}");
                };
                let m = v.message.expect("the message to verify");
                assert_eq!(m.body, b"verify me");
                assert_eq!(m.topic.unwrap().name, topic);
                to_endpoint
                    .send(TelemetryCommand {
                        status: Some(Status {
                            code: answer as i32,
                            message: String::new(),
                        }),
                        command: Some(telemetry_command::Command::VerifyMessageResult(
                            VerifyMessageResult { nonce: v.nonce },
                        )),
                    })
                    .await
                    .unwrap();
            };
            let (resp, ()) = tokio::join!(call, client);
            expect_code(&resp, ResponseCode::Success);
            let r: ConsumeMessageDirectlyResult = from_json(&resp.body).unwrap();
            assert_eq!(r.consume_result, want, "{r:?}");
        }
    });
}
