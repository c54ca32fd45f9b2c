//! Compiles the RocketMQ 5.x protos (apache/rocketmq-apis, see proto/) with protoc: the
//! server for the endpoint, the client for the tests and tern-bench.

fn main() {
    let protos = [
        "proto/apache/rocketmq/v2/service.proto",
        "proto/apache/rocketmq/v2/admin.proto",
    ];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    println!("cargo:rerun-if-changed=proto/apache/rocketmq/v2/definition.proto");
    if let Err(e) = tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_protos(&protos, &["proto"])
    {
        // protoc is Debian's protobuf-compiler (test.sh installs it).
        panic!("compiling the RocketMQ protos (is protoc installed? apt-get install protobuf-compiler): {e}");
    }
}
