//! A process that chooses smol (as `tern-edge` does) runs every task on the smol
//! executor's threads, and no other executor (the servers' pool, async-std's) is ever started: not by a spawn, not by
//! blocking work, not by a server or a connection to a host name.
//!
//! Its own test binary, so its own process: the choice is once per process.

use std::sync::Arc;
use std::sync::Once;
use std::time::Duration;

use tern_shell::runtime::{self, InstallError, Runtime, SMOL_THREAD_PREFIX};
use tern_shell::{
    Connection, ConnectionConfig, ConnectionCtx, Processor, RemotingCommand, RequestCode,
    ResponseCode, Server, ServerConfig,
};

#[path = "support/threads.rs"]
mod threads;

use threads::{join_all, process_threads, thread_name};

const THREADS: usize = 2;

fn smol_chosen() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| runtime::install(Runtime::Smol { threads: THREADS }).unwrap());
}

fn assert_async_std_never_started() {
    // A new thread carries its creator's name until it names itself (a blocking-pool
    // thread spawned from an executor thread is briefly `tern-smol-0`), so the count is
    // read until it settles; an async-std executor thread fails at once.
    let (mut smol, mut names) = (0, Vec::new());
    let settled = tern_testkit::poll_until(Duration::from_secs(2), || {
        names = process_threads();
        assert!(
            !names
                .iter()
                .any(|n| n.starts_with("async-std") || n.starts_with(runtime::POOL_THREAD_PREFIX)),
            "another executor's threads run: {names:?}"
        );
        smol = names
            .iter()
            .filter(|n| n.starts_with(SMOL_THREAD_PREFIX))
            .count();
        smol == THREADS
    });
    assert!(
        settled,
        "{smol} threads named {SMOL_THREAD_PREFIX}*, expected {THREADS}: {names:?}"
    );
}

#[test]
fn spawned_tasks_run_on_the_smol_executor_threads() {
    smol_chosen();
    assert_eq!(runtime::chosen(), Runtime::Smol { threads: THREADS });
    let names = runtime::block_on(async {
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                runtime::spawn(async {
                    runtime::yield_now().await;
                    thread_name()
                })
            })
            .collect();
        join_all(tasks).await
    });
    for n in &names {
        assert!(n.starts_with(SMOL_THREAD_PREFIX), "a task ran on '{n}'");
    }
    assert_async_std_never_started();
}

#[test]
fn a_dropped_handle_detaches_its_task_as_under_async_std() {
    smol_chosen();
    let (tx, rx) = async_std::channel::bounded(1);
    drop(runtime::spawn(async move {
        runtime::sleep(Duration::from_millis(30)).await;
        let _ = tx.send(thread_name()).await;
    }));
    let ran_on = runtime::block_on(runtime::timeout(Duration::from_secs(5), rx.recv()))
        .expect("a detached task still runs")
        .unwrap();
    assert!(ran_on.starts_with(SMOL_THREAD_PREFIX), "{ran_on}");
}

#[test]
fn blocking_work_runs_off_the_executor_threads() {
    smol_chosen();
    let on = runtime::block_on(runtime::spawn_blocking(thread_name));
    assert!(
        !on.starts_with(SMOL_THREAD_PREFIX),
        "blocking work on '{on}'"
    );
    assert_async_std_never_started();
}

#[test]
fn a_second_choice_is_refused_and_names_the_first() {
    smol_chosen();
    match runtime::install(Runtime::Pool { threads: 2 }) {
        Err(InstallError::AlreadyChosen(Runtime::Smol { threads: THREADS })) => {}
        other => panic!("{other:?}"),
    }
}

struct Echo;

impl Processor for Echo {
    async fn process(&self, _: &ConnectionCtx, req: RemotingCommand) -> Option<RemotingCommand> {
        Some(RemotingCommand::response_to(&req, ResponseCode::Success).with_remark(thread_name()))
    }
}

#[test]
fn a_server_and_a_connection_by_host_name_start_no_async_std_thread() {
    smol_chosen();
    runtime::block_on(async {
        // "localhost" is resolved, not parsed: the look-up goes to the blocking pool,
        // where async-std's own resolver would have started its executor.
        let server = Server::bind("localhost:0", ServerConfig::default(), Arc::new(Echo))
            .await
            .unwrap();
        let addr = format!("localhost:{}", server.local_addr().port());
        let conn = Connection::connect(&addr, ConnectionConfig::default(), Duration::from_secs(5))
            .await
            .unwrap();
        let req = RemotingCommand::request_code(RequestCode::Other(9001));
        let res = conn.request(req, Duration::from_secs(5)).await.unwrap();
        assert_eq!(res.response_code(), ResponseCode::Success);
        let served_on = res.remark.unwrap_or_default();
        assert!(
            served_on.starts_with(SMOL_THREAD_PREFIX),
            "served on '{served_on}'"
        );
        conn.close();
        server.shutdown().await;
    });
    assert_async_std_never_started();
}

#[test]
fn an_unknown_host_is_a_clear_error() {
    smol_chosen();
    let e = runtime::block_on(runtime::resolve("no-such-host.invalid:9876")).unwrap_err();
    assert!(e.to_string().contains("no-such-host.invalid:9876"), "{e}");
}
