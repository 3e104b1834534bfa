//! Faults the bootstrap must survive or report clearly: Windmill not up yet, 5xx answers,
//! connections dropped mid-call, a concurrent writer, a crash between OpenBao and the include.

use std::process::Stdio;
use std::time::Duration;

use fediversity_testkit::bootstrap_bin;
use fediversity_testkit::node::Node;
use fediversity_testkit::process;
use fediversity_testkit::windmill_fake::Fault;
use serde_json::json;

use crate::support::{self, assert_has_line, assert_line};

const CREATE: &str = "/api/w/fediversity/scripts/create";

#[test]
fn windmill_not_listening_at_first_is_waited_for() {
    // Windmill refuses connections until the bootstrap has been refused at least once (seen in
    // its debug line for the retry); only then does it start listening. No clock involved.
    let node = Node::with_windmill_refusing(Duration::from_secs(600));
    let config = node.write_config();
    let mut child = Node::command(bootstrap_bin!(), &config, &[])
        .env("BOOTSTRAP_LOG", "debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = process::StreamWatch::new(child.stderr.take().unwrap());
    let refused = stderr.wait_for(b"debug: GET /api/version: cannot connect", Duration::from_secs(30));
    assert!(
        node.windmill.requests().is_empty(),
        "nothing got through while it refused"
    );
    node.windmill.listen_now();
    let status = child.wait().unwrap();
    let mut stdout = Vec::new();
    std::io::Read::read_to_end(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    let run = node.finish(std::process::Output {
        status,
        stdout,
        stderr: stderr.finish(),
    });
    assert!(refused, "no refused try was retried: {run:?}");
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.step_line(1).contains("answered GET /api/version (CE v1.587.0)"),
        "{run:?}"
    );
    assert_eq!(node.windmill.script_count(), 6);
}

#[test]
fn windmill_never_up_fails_step_1_after_the_timeout() {
    let mut node = Node::with_windmill_refusing(Duration::from_secs(600));
    node.config["retry"]["ready_timeout_seconds"] = json!(1);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    assert_has_line(
        &run.stderr,
        "fediversity-windmill-bootstrap: error: step 1/9 ready failed: Windmill did not answer GET /api/version within 1 s: cannot connect[..]",
    );
}

#[test]
fn windmill_accepting_but_never_answering_fails_step_1_at_the_ready_timeout() {
    // A listener that accepts every connection and never answers: each try hangs until the
    // request timeout, set far beyond the ready timeout here.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let holder = held.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            holder.lock().unwrap().push(stream);
        }
    });
    let mut node = support::node();
    node.config["windmill"]["url"] = json!(url);
    node.config["retry"]["ready_timeout_seconds"] = json!(1);
    node.config["retry"]["request_timeout_seconds"] = json!(600);
    let config = node.write_config();
    let mut child = Node::command(bootstrap_bin!(), &config, &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Not a speed target: a watchdog far below the 600 s a try could hang, far above the 1 s
    // the wait is bounded by.
    let exited = process::wait_until(Duration::from_secs(60), || child.try_wait().unwrap().is_some());
    if !exited {
        let _ = child.kill();
    }
    let run = node.finish(child.wait_with_output().unwrap());
    assert!(
        exited,
        "the wait for Windmill was not bounded by retry.ready_timeout_seconds: {run:?}"
    );
    assert_eq!(run.code, 3, "{run:?}");
    assert_has_line(
        &run.stderr,
        "fediversity-windmill-bootstrap: error: step 1/9 ready failed: Windmill did not answer GET /api/version within 1 s: the request got no answer",
    );
    // It did connect: the listener holds the connection it never answered.
    assert!(!held.lock().unwrap().is_empty());
}

#[test]
fn server_errors_are_retried_then_converge() {
    let node = support::node();
    // Two failures, three tries allowed: the third succeeds.
    node.windmill.fail("POST", CREATE, Fault::Status(500), 2);
    node.windmill
        .fail("POST", "/api/users/tokens/create", Fault::Status(502), 2);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(node.windmill.script_count(), 6);
    let creates = node
        .windmill
        .requests()
        .iter()
        .filter(|r| support::is_upload(r))
        .count();
    assert_eq!(creates, 8, "4 scripts and 2 probes, 2 of the tries failed");
    // Each of the two failed token mints was answered 502 without minting: one token.
    assert_eq!(
        node.windmill
            .tokens()
            .iter()
            .filter(|t| t.label == "fediversity")
            .count(),
        1
    );
}

#[test]
fn a_workspace_and_folder_created_by_a_try_whose_answer_was_lost_count_as_present() {
    // The server creates them and the answer is lost: the retry gets 400 "already exists".
    let node = support::node();
    node.windmill
        .fail("POST", "/api/workspaces/create", Fault::DropAfterHandling, 1);
    node.windmill
        .fail("POST", "/api/w/fediversity/folders/create", Fault::DropAfterHandling, 1);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    // (The front-end's token is refused a folder of its own in step 7: not counted.)
    let front = support::stored_token(&node);
    let requests: Vec<_> = node
        .windmill
        .requests()
        .into_iter()
        .filter(|r| r.token != front)
        .collect();
    assert_eq!(
        requests
            .iter()
            .filter(|r| r.is("POST", "/api/workspaces/create"))
            .count(),
        2
    );
    assert_eq!(
        requests
            .iter()
            .filter(|r| r.is("POST", "/api/w/fediversity/folders/create"))
            .count(),
        2
    );
    assert_eq!(
        node.windmill.workspaces(),
        vec!["admins".to_owned(), "fediversity".to_owned()]
    );
    assert_eq!(
        node.windmill.folders(),
        vec![("fediversity".to_owned(), "fediversity".to_owned())]
    );
    assert_eq!(node.windmill.script_count(), 6);
}

#[test]
fn an_error_after_retried_failures_reports_every_try() {
    // A 502 is retried; the second try gets a 401, which is not: two tries, both counted.
    let node = support::node();
    node.windmill.fail(
        "POST",
        "/api/settings/global/instance_python_version",
        Fault::Status(502),
        1,
    );
    node.windmill.fail(
        "POST",
        "/api/settings/global/instance_python_version",
        Fault::Status(401),
        1,
    );
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    assert_has_line(
        &run.stderr,
        "fediversity-windmill-bootstrap: error: step 6/9 settings failed: Windmill POST /api/settings/global/instance_python_version answered 401 after 2 tries: Unauthorized",
    );
    // Control: an error on the first try says nothing about tries.
    node.windmill.fail(
        "POST",
        "/api/settings/global/instance_python_version",
        Fault::Status(401),
        1,
    );
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    assert_has_line(
        &run.stderr,
        "fediversity-windmill-bootstrap: error: step 6/9 settings failed: Windmill POST /api/settings/global/instance_python_version answered 401: Unauthorized",
    );
}

#[test]
fn persistent_server_errors_fail_the_step_by_name_and_a_rerun_converges() {
    let node = support::node();
    node.windmill.fail(
        "POST",
        "/api/settings/global/instance_python_version",
        Fault::Status(502),
        3,
    );
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    assert_has_line(
        &run.stderr,
        "fediversity-windmill-bootstrap: error: step 6/9 settings failed: Windmill POST /api/settings/global/instance_python_version answered 502 after 3 tries: Bad Gateway",
    );
    // The steps after it did not run: no token stored, and the UI's token it minted (the
    // front-end's comes in step 7) was deleted.
    assert!(node.include_meta().is_none());
    assert_eq!(support::stored_token(&node), None);
    assert_eq!(node.windmill.setting("instance_python_version"), None);
    assert_has_line(
        &run.stderr,
        "fediversity-windmill-bootstrap: deleted the token labeled fediversity-ui that this run minted, as the run failed before storing it",
    );
    assert_eq!(support::labeled(&node, support::UI), Vec::<String>::new());
    assert!(
        node.windmill
            .requests()
            .iter()
            .filter(|r| r.is("POST", "/api/users/tokens/create"))
            .count()
            == 1
    );

    let mark = node.windmill.requests().len();
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(node.windmill.setting("instance_python_version"), Some(json!("3.12")));
    assert_eq!(node.windmill.script_count(), 6);
    // The failed run left no token for this one to revoke.
    assert_line(
        run.step_line(9),
        "fediversity-windmill-bootstrap: step 9/9 revoke: older tokens deleted: 0 of the operator frontend, 0 of the superadmin's labeled fediversity, \
         0 labeled fediversity-ui: unchanged",
    );
    assert_eq!(
        (
            support::labeled(&node, support::FRONT_END).len(),
            support::labeled(&node, support::UI).len()
        ),
        (1, 1)
    );
    assert!(
        !node
            .windmill
            .requests_since(mark)
            .iter()
            .any(|r| r.path.contains("create") && r.path.contains("workspaces"))
    );
}

#[test]
fn a_token_that_is_not_letters_and_digits_is_refused_and_never_shown() {
    // Printable, without spaces, but with a quote and a semicolon, which would end the nginx
    // directive and start another.
    let token = "Ab12345678\";more_set_headers;x";
    let node = support::node();
    node.windmill.next_token(token);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    assert_has_line(
        &run.stderr,
        "fediversity-windmill-bootstrap: error: step 3/9 token failed: Windmill POST /api/users/tokens/create: unexpected answer: the answer is not a Windmill token, which is letters and digits only (the answer is not shown)",
    );
    // Positive control: the fake did answer with it (and `finish` scanned the output for it,
    // as for every token the fake ever handed out).
    assert!(node.windmill.ever_minted().iter().any(|t| t == token));
    // Nothing was written with it.
    assert!(node.include_meta().is_none());
    assert!(
        node.windmill
            .requests()
            .iter()
            .all(|r| r.token.as_deref() != Some(token))
    );

    // A real token next time: the rerun converges.
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(node.include_token().unwrap().chars().all(|c| c.is_ascii_alphanumeric()));
}

fn converge_then_edit_deploy(node: &Node) -> String {
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    node.write_script("f/fediversity/deploy.py", "def main():\n    return 'v2'\n");
    node.windmill.versions("fediversity", "f/fediversity/deploy")[0]
        .hash
        .clone()
}

#[test]
fn a_connection_dropped_after_the_upload_took_effect_still_gives_one_version() {
    let node = support::node();
    let first = converge_then_edit_deploy(&node);
    // The server creates the version, the answer is lost; the retry gets "same hash".
    node.windmill.fail("POST", CREATE, Fault::DropAfterHandling, 1);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    let versions = node.windmill.versions("fediversity", "f/fediversity/deploy");
    assert_eq!(versions.len(), 2);
    assert_eq!(versions[1].parent_hashes.first(), Some(&first));
    assert_eq!(
        node.windmill
            .requests()
            .iter()
            .filter(|r| support::is_upload(r))
            .count(),
        6 + 2
    );
}

#[test]
fn a_connection_dropped_before_the_upload_took_effect_gives_one_version() {
    let node = support::node();
    converge_then_edit_deploy(&node);
    node.windmill.fail("POST", CREATE, Fault::DropBeforeHandling, 1);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(node.windmill.versions("fediversity", "f/fediversity/deploy").len(), 2);
}

#[test]
fn a_dropped_upload_that_fails_the_run_converges_on_rerun() {
    let mut node = support::node();
    converge_then_edit_deploy(&node);
    // No retries: the drop fails step 5; the version was created all the same.
    node.config["retry"]["call_attempts"] = json!(1);
    node.windmill.fail("POST", CREATE, Fault::DropAfterHandling, 1);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    assert_has_line(
        &run.stderr,
        "fediversity-windmill-bootstrap: error: step 5/9 scripts failed: f/fediversity/deploy: Windmill POST /api/w/fediversity/scripts/create (f/fediversity/deploy): [..]",
    );
    assert_eq!(node.windmill.versions("fediversity", "f/fediversity/deploy").len(), 2);
    // The run never learnt the hash of the version it made, which a worker then locked: a lock
    // on a version the state file does not know may be anyone's (pinned packages), so the rerun
    // replaces it once with one of its own.
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.step_line(5).contains("updated f/fediversity/deploy (lock)"),
        "{run:?}"
    );
    assert_eq!(node.windmill.versions("fediversity", "f/fediversity/deploy").len(), 3);
    let mark = node.windmill.requests().len();
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.step_line(5).ends_with(": unchanged"), "{run:?}");
    assert!(!node.windmill.requests_since(mark).iter().any(support::is_upload));
}

#[test]
fn a_concurrent_writer_breaking_the_lineage_is_reread_and_retried_once() {
    let node = support::node();
    converge_then_edit_deploy(&node);
    node.windmill
        .concurrent_write_before_create("f/fediversity/deploy", "print('theirs')\n");
    let mark = node.windmill.requests().len();
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    let versions = node.windmill.versions("fediversity", "f/fediversity/deploy");
    assert_eq!(versions.len(), 3, "ours, theirs, ours again on top");
    assert_eq!(versions[1].content, "print('theirs')\n");
    assert_eq!(versions[2].content, "def main():\n    return 'v2'\n");
    assert_eq!(versions[2].parent_hashes.first(), Some(&versions[1].hash));
    let for_deploy: Vec<String> = node
        .windmill
        .requests_since(mark)
        .into_iter()
        .filter(|r| {
            r.path.ends_with("/scripts/get/p/f/fediversity/deploy")
                || (r.path == CREATE && r.body.contains("f/fediversity/deploy"))
        })
        .map(|r| r.method)
        .collect();
    // The last GET: the wait for the lock of the version it made.
    assert_eq!(for_deploy, vec!["GET", "POST", "GET", "POST", "GET"]);
}

#[test]
fn a_concurrent_writer_on_a_new_path_is_a_path_conflict_reread_once() {
    let node = support::node();
    node.windmill
        .concurrent_write_before_create("f/fediversity/hello", "print('theirs')\n");
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    let versions = node.windmill.versions("fediversity", "f/fediversity/hello");
    assert_eq!(versions.len(), 2);
    assert_eq!(versions[1].language, "bash");
    assert_eq!(versions[1].parent_hashes.first(), Some(&versions[0].hash));
}

#[test]
fn a_writer_that_strikes_twice_is_not_retried_a_second_time() {
    let node = support::node();
    converge_then_edit_deploy(&node);
    node.windmill
        .concurrent_write_before_create("f/fediversity/deploy", "print('theirs 1')\n");
    node.windmill
        .concurrent_write_before_create("f/fediversity/deploy", "print('theirs 2')\n");
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    assert_has_line(
        &run.stderr,
        "fediversity-windmill-bootstrap: error: step 5/9 scripts failed: f/fediversity/deploy: a concurrent writer changed the script again after it was re-read; not retried twice",
    );
}

#[test]
fn a_crash_between_openbao_and_the_include_is_repaired_by_the_rerun() {
    let mut node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let (ui_a, front_a) = (node.include_token().unwrap(), support::stored_token(&node).unwrap());

    // Run 2 stops right after step 7: the include cannot be written (its directory is a file),
    // which leaves the state a crash between the two writes would leave. The configured
    // include is pointed there for this run only.
    let good_include = node.config["ui_auth"]["file"].clone();
    std::fs::write(node.path().join("blocked"), "a file, not a directory").unwrap();
    node.config["ui_auth"]["file"] = json!(node.path().join("blocked/token.conf"));
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    assert_has_line(
        &run.stderr,
        "fediversity-windmill-bootstrap: error: step 8/9 ui-auth failed: [..]",
    );
    // OpenBao holds the front-end's new token B, which stays; the UI's new token, stored
    // nowhere, was deleted.
    let front_b = support::stored_token(&node).unwrap();
    assert_ne!(front_a, front_b);
    assert_has_line(
        &run.stderr,
        "fediversity-windmill-bootstrap: deleted the token labeled fediversity-ui that this run minted, as the run failed before storing it",
    );
    assert_eq!(support::labeled(&node, support::UI), vec![ui_a.clone()]);
    // The include still holds A, and nothing is revoked: step 9 did not run.
    node.config["ui_auth"]["file"] = good_include;
    assert_eq!(node.include_token().as_deref(), Some(ui_a.as_str()));
    assert!(node.windmill.has_token(&front_a) && node.windmill.has_token(&front_b));
    assert!(node.token_works(&ui_a));

    // The rerun: a new token of each label in its place; the older ones revoked.
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    let (ui_c, front_c) = (node.include_token().unwrap(), support::stored_token(&node).unwrap());
    assert!(node.token_works(&ui_c));
    assert_eq!(support::labeled(&node, support::UI), vec![ui_c]);
    assert_eq!(support::labeled(&node, support::FRONT_END), vec![front_c]);
    // Revoked: gone from the token list (the auth cache may keep them working a while).
    for gone in [&ui_a, &front_a, &front_b] {
        assert!(!node.windmill.has_token(gone));
    }
    assert_line(
        run.step_line(9),
        "fediversity-windmill-bootstrap: step 9/9 revoke: older tokens deleted: 2 of the operator frontend, 0 of the superadmin's labeled fediversity, \
         1 labeled fediversity-ui: updated",
    );
}

#[test]
fn a_listed_token_prefix_stays_one_path_segment() {
    // Step 9 puts the prefixes that `tokens/list` answers into `DELETE …/tokens/delete/<prefix>`.
    // Windmill's own tokens are letters and digits; a server that answers anything else (here:
    // a token someone else minted on a fake that allows it) must not steer the delete, sent with
    // the superadmin's token, to another endpoint.
    let node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let odd = "../../ws/x?yABCDEFGHIJKLMNOPQRSTUVWXYZ";
    node.windmill.next_token(odd);
    let session = node.login(&node.password).unwrap();
    let minted = fediversity_testkit::http::request(
        "POST",
        &format!("{}/api/users/tokens/create", node.windmill.url),
        &[("Authorization", &format!("Bearer {session}"))],
        Some(r#"{"label": "fediversity"}"#),
    );
    assert_eq!((minted.status, minted.body.as_str()), (201, odd));
    let mark = node.windmill.requests().len();
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    // The odd token was deleted like any other, through the delete endpoint.
    assert!(!node.windmill.has_token(odd));
    let deletes: Vec<String> = node
        .windmill
        .requests_since(mark)
        .into_iter()
        .filter(|r| r.method == "DELETE")
        .map(|r| r.path)
        .collect();
    // The odd one, the first run's front-end token and its UI token, and the two impersonation
    // tokens deleting themselves.
    assert_eq!(deletes.len(), 5, "{deletes:?}");
    for path in &deletes {
        assert!(
            path.starts_with("/api/users/tokens/delete/") && path.matches('/').count() == 5,
            "{path}"
        );
    }
}

#[test]
fn an_answer_over_the_bound_fails_the_call_naming_the_bound_and_is_not_retried() {
    let node = support::node();
    node.windmill
        .fail("POST", "/api/auth/login", Fault::Oversized(5 << 20), 1);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: error: step 2/9 login failed: Windmill POST /api/auth/login: the answer is larger than 4 MiB, the most that is read",
    );
    assert_eq!(
        node.windmill
            .requests()
            .iter()
            .filter(|r| r.is("POST", "/api/auth/login"))
            .count(),
        1,
        "not retried"
    );
    // Positive control: an answer just under the bound is read whole (and then refused as the
    // token it is not).
    node.windmill
        .fail("POST", "/api/auth/login", Fault::Oversized((4 << 20) - 1), 1);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: error: step 2/9 login failed: Windmill POST /api/auth/login: unexpected answer: the answer is not a Windmill token[..]",
    );
}

#[test]
fn an_endless_answer_without_a_length_is_read_only_up_to_the_bound() {
    use std::io::{Read, Write};
    // A server that answers GET /api/version with a chunked body that never ends, and counts
    // what it could send on each connection before the client closed it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let sent = std::sync::Arc::new(std::sync::Mutex::new(Vec::<usize>::new()));
    let counts = sent.clone();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let counts = counts.clone();
            std::thread::spawn(move || {
                let mut request = Vec::new();
                let mut byte = [0u8; 1];
                while !request.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                    request.push(byte[0]);
                }
                let chunk = [b'v'; 65536];
                let mut total = 0;
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n");
                while stream
                    .write_all(b"10000\r\n")
                    .and_then(|()| stream.write_all(&chunk))
                    .and_then(|()| stream.write_all(b"\r\n"))
                    .is_ok()
                {
                    total += chunk.len();
                    if total > 1 << 30 {
                        break;
                    }
                }
                counts.lock().unwrap().push(total);
            });
        }
    });
    let mut node = support::node();
    node.config["windmill"]["url"] = json!(url);
    node.config["retry"]["ready_timeout_seconds"] = json!(1);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: error: step 1/9 ready failed: Windmill did not answer GET /api/version within 1 s: the answer is larger than 4 MiB, the most that is read",
    );
    // Each connection was closed soon after the bound (socket buffers hold a few MiB more),
    // and the server did send past the bound: the client stopped reading, not the server. (The
    // try under way when the wait ended may have been cut short of it.)
    let sent = sent.lock().unwrap().clone();
    assert!(sent.iter().any(|n| *n >= 4 << 20), "{sent:?}");
    assert!(sent.iter().all(|n| *n < 64 << 20), "{sent:?}");
}
