//! A fresh node: every step creates what is missing; the front-end's scoped token ends up in
//! OpenBao, the UI's full one in the nginx include, and each works for what it is for.

use std::os::unix::fs::MetadataExt;

use fediversity_testkit::bootstrap_bin;
use fediversity_testkit::node::ui_gid;
use fediversity_testkit::postgres::ADMIN_EMAIL;
use fediversity_testkit::venv;
use fediversity_testkit::windmill_fake::{JobRow, Profile, Recorded, UserRow};

use crate::support::{self, assert_line};
use serde_json::json;

crate::on_every_profile!(a_fresh_node_converges, |profile| super::a_fresh_node_converges(profile));

fn a_fresh_node_converges(profile: Profile) {
    let node = support::node_on(profile);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");

    // One line per step, in order, each whole as docs/operators/bootstrap.md specifies it.
    let dir = node.scripts_dir().display().to_string();
    let lines = run.step_lines();
    let expected = [
        format!("step 1/9 ready: http://127.0.0.1:[..] answered GET /api/version ({}) after [..] s: unchanged", profile.version()),
        "step 2/9 login: admin@windmill.dev did not log in with the node password; its hash was written to the password table and it logs in now: updated".to_owned(),
        "step 3/9 token: minted a new token labeled fediversity-ui (the superadmin's full rights) for the nginx include and the rest of this run: created".to_owned(),
        "step 4/9 workspace: workspace fediversity and folder fediversity, operator frontend@fediversity.invalid (u/frontend) with read on the folder (added, given read on the folder): created".to_owned(),
        format!("step 5/9 scripts: 4 scripts in {dir} and the 2 probes of step 7, created f/fediversity/_runner f/fediversity/bootstrap_probe f/fediversity/deploy f/fediversity/destroy f/fediversity/hello u/admin/bootstrap_probe, 0 unchanged, waited [..] s for a worker to lock f/fediversity/_runner f/fediversity/deploy f/fediversity/destroy: created"),
        "step 6/9 settings: global settings instance_python_version (differed: instance_python_version): updated".to_owned(),
        support::openbao_line(&format!("{} field value (mount secret/, KV v2)", node.bao_path), profile, ": created")
            .strip_prefix("fediversity-windmill-bootstrap: ")
            .unwrap()
            .to_owned(),
        format!("step 8/9 ui-auth: {} (root:postgres 0440) holds the new token labeled fediversity-ui: created", node.include_path().display()),
        "step 9/9 revoke: older tokens deleted: 0 of the operator frontend, 0 of the superadmin's labeled fediversity, 0 labeled fediversity-ui: unchanged".to_owned(),
    ];
    assert_eq!(lines.len(), expected.len(), "{run:?}");
    for (line, pattern) in lines.iter().zip(&expected) {
        assert_line(line, &format!("fediversity-windmill-bootstrap: {pattern}"));
    }
    assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: converged",
    );

    // Windmill: workspace, folder, scripts (README.md ignored) and the probes, setting.
    let w = &node.windmill;
    assert_eq!(w.workspaces(), vec!["admins".to_owned(), "fediversity".to_owned()]);
    assert_eq!(w.folders(), vec![("fediversity".to_owned(), "fediversity".to_owned())]);
    assert_eq!(w.script_count(), 6);
    let deploy = w.versions("fediversity", "f/fediversity/deploy");
    assert_eq!(deploy.len(), 1);
    assert_eq!(
        deploy[0].content,
        std::fs::read_to_string(node.scripts_dir().join("f/fediversity/deploy.py")).unwrap()
    );
    assert_eq!(
        (
            deploy[0].language.as_str(),
            deploy[0].summary.as_str(),
            deploy[0].description.as_str()
        ),
        ("python3", "deploy", "")
    );
    // Locked by the worker before the run went on: it runs.
    assert!(deploy[0].lock.is_some());
    assert_eq!(w.versions("fediversity", "f/fediversity/hello")[0].language, "bash");
    assert!(w.versions("fediversity", "README").is_empty());
    for probe in ["f/fediversity/bootstrap_probe", "u/admin/bootstrap_probe"] {
        let probe = &w.versions("fediversity", probe)[0];
        assert_eq!(probe.language, "bash");
        assert!(probe.content.ends_with("\nexit 0\n"), "{}", probe.content);
    }
    assert_eq!(w.setting("instance_python_version"), Some(json!("3.12")));

    // The operator: a member, an operator, no admin, with read on the folder and no more.
    assert_eq!(
        w.users("fediversity"),
        vec![UserRow {
            email: support::OPERATOR_EMAIL.to_owned(),
            username: support::OPERATOR.to_owned(),
            is_admin: false,
            operator: true,
            disabled: false
        }]
    );
    let folder = w.folder("fediversity", "fediversity").unwrap();
    assert!(!folder.owners.contains(&"u/frontend".to_owned()), "{folder:?}");
    assert_eq!(folder.extra_perms.get("u/frontend"), Some(&false));

    // The tokens: OpenBao holds the operator's only token, scoped and bound as configured; the
    // include holds the UI's, the superadmin's, unscoped; both work. No impersonation token is
    // left, and the superadmin has no token of the front-end's label.
    let front = support::front_token(&node);
    let ui = support::labeled(&node, support::UI);
    assert_eq!(ui.len(), 1);
    assert_eq!(support::stored_token(&node).as_ref(), Some(&front));
    assert_eq!(node.include_token().as_ref(), Some(&ui[0]));
    let rows = w.tokens();
    let row = |token: &str| rows.iter().find(|t| t.token == token).unwrap().clone();
    assert_eq!(
        (
            row(&front).scopes,
            row(&front).workspace_id.as_deref(),
            row(&front).super_admin
        ),
        (
            Some(vec![support::RUN_SCOPE.to_owned(), "jobs:write".to_owned()]),
            Some("fediversity"),
            false
        )
    );
    assert_eq!(row(&front).label, "fediversity");
    assert_eq!((row(&ui[0]).scopes, row(&ui[0]).workspace_id), (None, None));
    assert!(support::labeled(&node, "fediversity-windmill-bootstrap").is_empty());
    assert!(node.token_works(&ui[0]));

    // The token of step 3 made every call after the logout of the login session, but those of
    // the operator: the impersonation token's (mint, delete itself) and the new token's proof.
    let requests = w.requests();
    let minted_at = requests
        .iter()
        .position(|r| r.is("POST", "/api/users/tokens/create"))
        .unwrap();
    assert!(requests[minted_at + 1].is("POST", "/api/auth/logout"));
    assert_ne!(requests[minted_at + 1].token.as_deref(), Some(ui[0].as_str()));
    let impersonations: Vec<&Recorded> = requests
        .iter()
        .filter(|r| r.is("POST", "/api/users/tokens/impersonate"))
        .collect();
    // Step 7's mint and step 9's revocation, each with its own.
    assert_eq!(impersonations.len(), 2);
    assert!(
        impersonations
            .iter()
            .all(|r| r.token.as_deref() == Some(ui[0].as_str()))
    );
    let theirs: Vec<Option<String>> = w
        .ever_minted()
        .into_iter()
        .filter(|t| *t != front && *t != ui[0])
        .map(Some)
        .collect();
    assert!(
        requests[minted_at + 2..]
            .iter()
            .all(|r| [Some(front.clone()), Some(ui[0].clone())].contains(&r.token) || theirs.contains(&r.token)),
    );
    // The proof: its calls, in order, all with the new token; then nothing of the proof is left
    // queued: every job it made is cancelled, and each was scheduled a century ahead.
    let calls = support::proof_calls(&requests, &front);
    assert_eq!(
        &calls[..4],
        [
            "POST /api/w/fediversity/jobs/run/p/f/fediversity/deploy",
            "GET /api/w/fediversity/jobs_u/get/{id}",
            "POST /api/w/fediversity/jobs_u/queue/cancel/{id}",
            "GET /api/w/fediversity/jobs_u/get/{id}",
        ]
    );
    assert_eq!(calls.len(), 8 + 23);
    let jobs = w.jobs();
    assert!(!jobs.is_empty());
    assert!(jobs.iter().all(|j| j.completed && j.canceled), "{jobs:?}");
    assert!(
        jobs.iter().all(|j| j.scheduled_in_secs == Some(3_155_760_000)),
        "{jobs:?}"
    );
    // The deploy and destroy jobs were the operator's, cancelled by it.
    let own: Vec<&JobRow> = jobs.iter().filter(|j| j.permissioned_as == "u/frontend").collect();
    assert_eq!(own.len(), 2);
    assert!(own.iter().all(|j| j.canceled_by.as_deref() == Some("frontend")));

    // Two logins, both with the node password (before and after the hash was written): the
    // default password is only for --check. No login session is left behind.
    let logins: Vec<_> = requests.iter().filter(|r| r.is("POST", "/api/auth/login")).collect();
    assert_eq!(logins.len(), 2);
    assert!(
        logins
            .iter()
            .all(|r| r.body.contains(&format!("\"{}\"", node.password)))
    );
    assert_eq!(requests.iter().filter(|r| r.is("POST", "/api/auth/logout")).count(), 1);
    assert_eq!(node.sessions(), Vec::<String>::new());

    // The include: root, the configured group, 0440, and no temp file left beside it.
    assert_eq!(node.include_owner_group_mode(), Some((0, ui_gid(), 0o440)));
    let dir = node.include_path().parent().unwrap().to_owned();
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec!["token.conf".to_owned()]);
    let dir_meta = std::fs::metadata(&dir).unwrap();
    assert_eq!((dir_meta.gid(), dir_meta.mode() & 0o777), (ui_gid(), 0o750));

    // The password: an argon2id PHC string that fits VARCHAR(100), verified by both argon2s,
    // and the fake (which reads the table) lets the admin in with it.
    let hash = node.db.password_hash(ADMIN_EMAIL).unwrap();
    assert!(
        hash.starts_with("$argon2id$v=19$m=19456,t=2,p=1$") && hash.len() <= 100,
        "{hash}"
    );
    use argon2::{Argon2, PasswordHash, PasswordVerifier};
    let parsed = PasswordHash::new(&hash).unwrap();
    assert!(
        Argon2::default()
            .verify_password(node.password.as_bytes(), &parsed)
            .is_ok()
    );
    assert!(Argon2::default().verify_password(b"changeme", &parsed).is_err());
    assert!(venv::argon2_cffi_verifies(&hash, &node.password));
    assert!(!venv::argon2_cffi_verifies(&hash, "changeme"));
    // --check agrees, and prints the version.
    let check = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(check.code, 0, "{check:?}");
    assert!(
        check.step_line(1).contains(&format!("({})", profile.version())),
        "{check:?}"
    );
}

#[test]
fn help_documents_the_exit_codes() {
    let out = std::process::Command::new(bootstrap_bin!())
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for needle in [
        "--config",
        "--check",
        "0  every step held",
        "1  --check found",
        "2  configuration error",
        "3  a step failed",
    ] {
        assert!(help.contains(needle), "missing {needle:?} in:\n{help}");
    }
}

#[test]
fn an_archived_workspace_is_drift_and_a_run_unarchives_it() {
    let node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    node.windmill.archive_workspace("fediversity");
    let check = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(check.code, 1, "{check:?}");
    assert_line(
        check.step_line(4),
        "fediversity-windmill-bootstrap: step 4/9 workspace: workspace fediversity (archived) and folder fediversity, operator [..]: would update",
    );
    assert!(
        node.windmill.workspace_archived("fediversity"),
        "--check changes nothing"
    );
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_line(
        run.step_line(4),
        "fediversity-windmill-bootstrap: step 4/9 workspace: workspace fediversity (was archived, unarchived) and folder fediversity, operator [..]: updated",
    );
    assert!(!node.windmill.workspace_archived("fediversity"));
    // Positive control: live, it is left alone.
    let run = node.run(bootstrap_bin!(), &[]);
    assert!(run.step_line(4).ends_with(": unchanged"), "{run:?}");
    assert_eq!(node.run(bootstrap_bin!(), &["--check"]).code, 0);
}
