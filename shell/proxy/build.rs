//! Compiles the RocketMQ 5.x protos (apache/rocketmq-apis, vendored unchanged in
//! third_party/rocketmq-apis/): protox parses
//! them (with the well-known types it bundles, so no protoc is needed), tonic-prost-build
//! writes the server for the endpoint and the client for the tests and tern-bench.

fn main() {
    let protos = [
        "third_party/rocketmq-apis/apache/rocketmq/v2/service.proto",
        "third_party/rocketmq-apis/apache/rocketmq/v2/admin.proto",
    ];
    println!("cargo:rerun-if-changed=third_party/rocketmq-apis");
    let fds = match protox::compile(protos, ["third_party/rocketmq-apis"]) {
        Ok(f) => f,
        Err(e) => panic!("parsing the RocketMQ protos: {e}"),
    };
    if let Err(e) = tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)
    {
        panic!("generating the RocketMQ gRPC code: {e}");
    }
}
