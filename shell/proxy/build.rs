//! Compiles the RocketMQ 5.x protos (apache/rocketmq-apis, see proto/): protox parses
//! them (with the well-known types it bundles, so no protoc is needed), tonic-prost-build
//! writes the server for the endpoint and the client for the tests and tern-bench.

fn main() {
    let protos = [
        "proto/apache/rocketmq/v2/service.proto",
        "proto/apache/rocketmq/v2/admin.proto",
    ];
    println!("cargo:rerun-if-changed=proto");
    let fds = match protox::compile(protos, ["proto"]) {
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
