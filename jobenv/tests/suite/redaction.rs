//! Secrets never reach jobenv's output, however the program writes them, and output still
//! streams as it comes. Each test also checks that the text around the secret is intact, so a
//! test cannot pass by swallowing output.

use std::process::Stdio;
use std::time::Duration;

use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::Fixture;
use fediversity_testkit::process::StreamWatch;
use serde_json::json;

const TOKEN: &str = "tok-SECRET-0123456789";

fn with_program(body: &str) -> Fixture {
    let mut f = Fixture::new();
    f.program("web", "apply", body).declare("API_TOKEN", None).secret("API_TOKEN", TOKEN);
    f
}

fn run(f: &Fixture) -> (Vec<u8>, Vec<u8>) {
    let done = f.jobenv(jobenv_bin!()).verb("apply").payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"})).expect_success().run();
    (done.raw_stdout, done.stderr.into_bytes())
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn a_secret_in_one_write() {
    let (stdout, _) = run(&with_program(r#"printf 'before %s after\n' "$API_TOKEN""#));
    assert_eq!(String::from_utf8_lossy(&stdout), "before [REDACTED] after\n");
}

#[test]
fn a_secret_split_over_two_writes_with_a_pause() {
    // printf is a dash builtin: each call is one write; the pause makes jobenv read them apart.
    let (stdout, _) = run(&with_program(r#"printf 'x %.6s' "$API_TOKEN"; sleep 0.3; printf '%s y\n' "${API_TOKEN#??????}""#));
    assert_eq!(String::from_utf8_lossy(&stdout), "x [REDACTED] y\n");
}

#[test]
fn a_secret_inside_a_long_line() {
    let body = r#"head -c 200000 /dev/zero | tr '\0' a; printf %s "$API_TOKEN"; head -c 200000 /dev/zero | tr '\0' b; echo"#;
    let (stdout, _) = run(&with_program(body));
    let expected = format!("{}[REDACTED]{}\n", "a".repeat(200_000), "b".repeat(200_000));
    assert!(stdout == expected.as_bytes(), "long line altered (len {} vs {})", stdout.len(), expected.len());
}

#[test]
fn a_secret_on_stderr() {
    let (stdout, stderr) = run(&with_program(r#"printf 'err %s\n' "$API_TOKEN" >&2; echo out"#));
    assert_eq!(String::from_utf8_lossy(&stdout), "out\n");
    assert!(contains(&stderr, "err [REDACTED]\n"), "{}", String::from_utf8_lossy(&stderr));
    assert!(!contains(&stderr, TOKEN));
}

#[test]
fn a_secret_next_to_invalid_utf8() {
    let (stdout, _) = run(&with_program(r#"printf '\377%s\376\n\300' "$API_TOKEN""#));
    assert_eq!(stdout, b"\xff[REDACTED]\xfe\n\xc0");
}

#[test]
fn a_multi_line_secret_and_its_lines() {
    let cert = "-----BEGIN TEST KEY-----\nMIIEvQIBADANBgkqhkiG9w0B\nshort\n-----END TEST KEY-----";
    let mut f = Fixture::new();
    f.program(
        "web",
        "apply",
        r#"printf 'whole: %s\n' "$CERT"; printf '%s\n' "$CERT" | while IFS= read -r l; do echo "line: $l"; sleep 0.05; done"#,
    );
    f.declare("CERT", None).secret("CERT", cert);
    let (stdout, _) = run(&f);
    let text = String::from_utf8_lossy(&stdout);
    assert_eq!(
        text,
        "whole: [REDACTED]\nline: [REDACTED]\nline: [REDACTED]\nline: short\nline: [REDACTED]\n",
        "lines of 8 bytes and more are secrets on their own; shorter ones are not"
    );
}

#[test]
fn the_json_escaped_form_of_a_secret() {
    let mut f = Fixture::new();
    f.program("web", "apply", r#"printf '{"token": "pa\\"ss-word-1"}\n'"#);
    f.declare("API_TOKEN", None).secret("API_TOKEN", "pa\"ss-word-1");
    let (stdout, _) = run(&f);
    assert_eq!(String::from_utf8_lossy(&stdout), "{\"token\": \"[REDACTED]\"}\n");
}

#[test]
fn a_secret_shorter_than_four_bytes_is_not_redacted_and_warns() {
    let mut f = Fixture::new();
    f.program("web", "apply", r#"echo "pin=$PIN""#).declare("PIN", None).secret("PIN", "123");
    let (stdout, stderr) = run(&f);
    assert_eq!(String::from_utf8_lossy(&stdout), "pin=123\n");
    assert!(contains(&stderr, "jobenv: warning: secret PIN is shorter than 4 bytes and will not be redacted"));
}

#[test]
fn output_streams_while_the_program_runs_and_only_a_possible_secret_prefix_is_held() {
    let f = with_program("");
    let go = f.path().join("go");
    let printed = f.path().join("printed");
    let mut f = f;
    f.program(
        "web",
        "apply",
        &format!(
            r#"printf 'first line\nheld '; printf 'tok-'; touch {printed}; while [ ! -e {go} ]; do sleep 0.02; done; printf 'other %s\n' "$API_TOKEN""#,
            go = go.display(),
            printed = printed.display()
        ),
    );
    let mut child = f
        .command(jobenv_bin!(), &["run", "--verb", "apply"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}).to_string().as_bytes()).unwrap();
    }
    let mut stdout = StreamWatch::new(child.stdout.take().unwrap());
    // The program is blocked until `go` exists: this output came while it ran.
    assert!(stdout.wait_for(b"first line\nheld ", Duration::from_secs(20)), "no streamed output: {:?}", stdout.seen);
    // "tok-" could be the start of the secret, so it waits for more output. The program has
    // written it (it touched `printed` after), and jobenv had time to pass it on.
    assert!(fediversity_testkit::process::wait_until(Duration::from_secs(20), || printed.exists()));
    std::thread::sleep(Duration::from_millis(300));
    stdout.wait_for(b"tok-", Duration::from_millis(1));
    assert!(!contains(&stdout.seen, "tok-"), "a possible secret prefix was released early");
    std::fs::write(&go, "").unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(String::from_utf8_lossy(&stdout.finish()), "first line\nheld tok-other [REDACTED]\n");
}

#[test]
fn env_shows_secrets_redacted() {
    let f = with_program("true");
    let done = f
        .jobenv(jobenv_bin!())
        .args(["env", "--verb", "apply", "--format", "json"])
        .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}))
        .expect_success()
        .expect_nowhere("the secret", TOKEN)
        .run();
    let env: serde_json::Value = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(env["env"]["API_TOKEN"], json!({"value": "[REDACTED]", "source": "secret"}));
}

#[test]
fn secrets_from_an_env_file_are_redacted() {
    let mut f = Fixture::new();
    f.program("web", "apply", r#"echo "tf=$TF_VAR_token""#);
    let env_file = f.path().join("secrets.env");
    std::fs::write(&env_file, "# tokens\nexport TF_VAR_token=env-file-secret-42\n").unwrap();
    // The program got the value (the line is there), and it was redacted on the way out.
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .env("JOBENV_SECRETS_ENV_FILES", &env_file)
        .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}))
        .expect_success()
        .expect_stdout("tf=[REDACTED]\n")
        .run();
}

#[test]
fn env_text_redacts_before_it_escapes() {
    // A secret state address with a quote: escaped as \' it would no longer match the secret.
    let mut f = Fixture::new();
    f.program("web", "apply", "true");
    f.secret("STATE_BASE_ADDRESS", "https://user:pa'ss-word@state.example/tf");
    let text = f.jobenv(jobenv_bin!()).args(["env", "--verb", "apply"]).payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"})).expect_success().run().stdout;
    // Positive control: the derived addresses are shown, with the secret part masked.
    assert!(text.contains("TF_HTTP_ADDRESS=[REDACTED]/ns  # derived"), "{text}");
    assert!(!text.contains("pa'ss-word") && !text.contains("pa\\'ss-word") && !text.contains("user:pa"), "{text}");
}

/// A secret with what encoders escape differently: non-ASCII (`ä`), a character above U+FFFF
/// (a surrogate pair in `\u` escapes), `<` and `&` (Go), `/` (PHP), a quote and `+` (.NET).
const ESCAPABLE: &str = "pä<ss&wo/rd\"-\u{1F600}-Zq+81";

#[test]
fn a_secret_printed_json_escaped_by_python_go_php_or_dotnet_is_redacted() {
    let mut f = Fixture::new();
    // Each line a real encoder's output (Python's json), or Python's made into another's: Go
    // escapes <, > and & as \u003c; PHP escapes / as \/; .NET's default writes upper-case hex
    // and escapes the quote, ' + and ` as \u too.
    let script = r#"
import json, os, re
s = os.environ["API_TOKEN"]
python = json.dumps(s)
go = json.dumps(s, ensure_ascii=False).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
php = json.dumps(s).replace("/", "\\/")
inner = json.dumps(s)[1:-1].replace('\\"', '"')
for c in "\"'+`<>&":
    inner = inner.replace(c, "\\u%04X" % ord(c))
dotnet = '"' + re.sub(r"\\u([0-9a-f]{4})", lambda m: "\\u" + m.group(1).upper(), inner) + '"'
for name, form in [("python", python), ("go", go), ("php", php), ("dotnet", dotnet), ("raw", json.dumps(s, ensure_ascii=False))]:
    print(name + ": " + form)
"#;
    let program = f.path().join("print-forms.py");
    std::fs::write(&program, script).unwrap();
    f.program("web", "apply", &format!("/usr/bin/python3 {}", program.display()));
    f.declare("API_TOKEN", None).secret("API_TOKEN", ESCAPABLE);
    let (stdout, _) = run(&f);
    assert_eq!(
        String::from_utf8_lossy(&stdout),
        "python: \"[REDACTED]\"\ngo: \"[REDACTED]\"\nphp: \"[REDACTED]\"\ndotnet: \"[REDACTED]\"\nraw: \"[REDACTED]\"\n"
    );
    // Positive control: the same program without the secret configured prints five different
    // spellings, none of which holds the raw secret (so only its escaped forms can match).
    let mut plain = Fixture::new();
    plain.program("web", "apply", &format!("API_TOKEN='{}' /usr/bin/python3 {}", ESCAPABLE.replace('\'', "'\\''"), program.display()));
    let (stdout, _) = run(&plain);
    let text = String::from_utf8_lossy(&stdout).into_owned();
    let forms: std::collections::BTreeSet<&str> = text.lines().map(|l| l.split_once(": ").unwrap().1).collect();
    assert_eq!(forms.len(), 5, "{text}");
    assert!(text.contains(r#"python: "p\u00e4<ss&wo/rd\"-\ud83d\ude00-Zq+81""#), "{text}");
    assert!(text.contains(r#"go: "pä\u003css\u0026wo/rd\"-"#), "{text}");
    assert!(text.contains(r#"php: "p\u00e4<ss&wo\/rd"#), "{text}");
    assert!(text.contains(r#"dotnet: "p\u00E4\u003Css\u0026wo/rd\u0022-\uD83D\uDE00-Zq\u002B81""#), "{text}");
}

#[test]
fn a_secret_printed_by_rusts_debug_or_gson_is_redacted() {
    // A decomposed accent and an apostrophe: Rust's `{:?}` writes `\u{301}` and leaves `'`
    // alone; Gson writes `=` and `'` as `\u003d` `\u0027` and leaves non-ASCII as it is.
    const SECRET: &str = "cafe\u{301}-pa'ss-QUJD==";
    let debug = format!("{SECRET:?}");
    let gson = format!("\"{}\"", SECRET.replace('=', "\\u003d").replace('\'', "\\u0027"));
    let printed = format!("debug: {debug}\ngson: {gson}\n");
    let mut f = Fixture::new();
    let file = f.path().join("printed");
    std::fs::write(&file, &printed).unwrap();
    f.program("web", "apply", &format!("cat {}", file.display()));
    f.declare("API_TOKEN", None).secret("API_TOKEN", SECRET);
    let (stdout, _) = run(&f);
    assert_eq!(String::from_utf8_lossy(&stdout), "debug: \"[REDACTED]\"\ngson: \"[REDACTED]\"\n");
    // Positive control: the spellings differ from the secret and from each other, and pass
    // unchanged when no secret is configured.
    assert!(!printed.contains(SECRET) && debug != gson, "{printed}");
    let mut plain = Fixture::new();
    plain.program("web", "apply", &format!("cat {}", file.display()));
    assert_eq!(String::from_utf8_lossy(&run(&plain).0), printed);
}

#[test]
fn a_secret_of_exactly_four_bytes_is_redacted_and_draws_no_warning() {
    let mut f = Fixture::new();
    f.program("web", "apply", r#"echo "pin=$PIN"; echo "short=$SHORT""#).declare("PIN", None).secret("PIN", "4b!t").declare("SHORT", None).secret("SHORT", "3b!");
    let (stdout, stderr) = run(&f);
    // The boundary: 4 bytes are a secret, 3 are not (the positive control).
    assert_eq!(String::from_utf8_lossy(&stdout), "pin=[REDACTED]\nshort=3b!\n");
    let stderr = String::from_utf8_lossy(&stderr);
    assert!(!stderr.contains("secret PIN is shorter"), "{stderr}");
    assert!(stderr.contains("secret SHORT is shorter than 4 bytes"), "{stderr}");
}
