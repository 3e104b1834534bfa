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
    f.program("web", "apply", body)
        .declare("API_TOKEN", None)
        .secret("API_TOKEN", TOKEN);
    f
}

fn run(f: &Fixture) -> (Vec<u8>, Vec<u8>) {
    let done = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}))
        .expect_success()
        .run();
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
    let (stdout, _) = run(&with_program(
        r#"printf 'x %.6s' "$API_TOKEN"; sleep 0.3; printf '%s y\n' "${API_TOKEN#??????}""#,
    ));
    assert_eq!(String::from_utf8_lossy(&stdout), "x [REDACTED] y\n");
}

#[test]
fn a_secret_inside_a_long_line() {
    let body =
        r#"head -c 200000 /dev/zero | tr '\0' a; printf %s "$API_TOKEN"; head -c 200000 /dev/zero | tr '\0' b; echo"#;
    let (stdout, _) = run(&with_program(body));
    let expected = format!("{}[REDACTED]{}\n", "a".repeat(200_000), "b".repeat(200_000));
    assert!(
        stdout == expected.as_bytes(),
        "long line altered (len {} vs {})",
        stdout.len(),
        expected.len()
    );
}

#[test]
fn a_secret_on_stderr() {
    let (stdout, stderr) = run(&with_program(r#"printf 'err %s\n' "$API_TOKEN" >&2; echo out"#));
    assert_eq!(String::from_utf8_lossy(&stdout), "out\n");
    assert!(
        contains(&stderr, "err [REDACTED]\n"),
        "{}",
        String::from_utf8_lossy(&stderr)
    );
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
        text, "whole: [REDACTED]\nline: [REDACTED]\nline: [REDACTED]\nline: short\nline: [REDACTED]\n",
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
    f.program("web", "apply", r#"echo "pin=$PIN""#)
        .declare("PIN", None)
        .secret("PIN", "123");
    let (stdout, stderr) = run(&f);
    assert_eq!(String::from_utf8_lossy(&stdout), "pin=123\n");
    assert!(contains(
        &stderr,
        "jobenv: warning: secret PIN is shorter than 4 bytes and will not be redacted"
    ));
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
        stdin
            .write_all(json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}).to_string().as_bytes())
            .unwrap();
    }
    let mut stdout = StreamWatch::new(child.stdout.take().unwrap());
    // The program is blocked until `go` exists: this output came while it ran.
    assert!(
        stdout.wait_for(b"first line\nheld ", Duration::from_secs(20)),
        "no streamed output: {:?}",
        stdout.seen
    );
    // "tok-" could be the start of the secret, so it waits for more output. The program has
    // written it (it touched `printed` after), and jobenv had time to pass it on.
    assert!(fediversity_testkit::process::wait_until(
        Duration::from_secs(20),
        || printed.exists()
    ));
    std::thread::sleep(Duration::from_millis(300));
    stdout.wait_for(b"tok-", Duration::from_millis(1));
    assert!(
        !contains(&stdout.seen, "tok-"),
        "a possible secret prefix was released early"
    );
    std::fs::write(&go, "").unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(
        String::from_utf8_lossy(&stdout.finish()),
        "first line\nheld tok-other [REDACTED]\n"
    );
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
    assert_eq!(
        env["env"]["API_TOKEN"],
        json!({"value": "[REDACTED]", "source": "secret"})
    );
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
    let text = f
        .jobenv(jobenv_bin!())
        .args(["env", "--verb", "apply"])
        .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}))
        .expect_success()
        .run()
        .stdout;
    // Positive control: the derived addresses are shown, with the secret part masked.
    assert!(text.contains("TF_HTTP_ADDRESS=[REDACTED]/ns  # derived"), "{text}");
    assert!(
        !text.contains("pa'ss-word") && !text.contains("pa\\'ss-word") && !text.contains("user:pa"),
        "{text}"
    );
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
    plain.program(
        "web",
        "apply",
        &format!(
            "API_TOKEN='{}' /usr/bin/python3 {}",
            ESCAPABLE.replace('\'', "'\\''"),
            program.display()
        ),
    );
    let (stdout, _) = run(&plain);
    let text = String::from_utf8_lossy(&stdout).into_owned();
    let forms: std::collections::BTreeSet<&str> = text.lines().map(|l| l.split_once(": ").unwrap().1).collect();
    assert_eq!(forms.len(), 5, "{text}");
    assert!(
        text.contains(r#"python: "p\u00e4<ss&wo/rd\"-\ud83d\ude00-Zq+81""#),
        "{text}"
    );
    assert!(text.contains(r#"go: "pä\u003css\u0026wo/rd\"-"#), "{text}");
    assert!(text.contains(r#"php: "p\u00e4<ss&wo\/rd"#), "{text}");
    assert!(
        text.contains(r#"dotnet: "p\u00E4\u003Css\u0026wo/rd\u0022-\uD83D\uDE00-Zq\u002B81""#),
        "{text}"
    );
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
    assert_eq!(
        String::from_utf8_lossy(&stdout),
        "debug: \"[REDACTED]\"\ngson: \"[REDACTED]\"\n"
    );
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
    f.program("web", "apply", r#"echo "pin=$PIN"; echo "short=$SHORT""#)
        .declare("PIN", None)
        .secret("PIN", "4b!t")
        .declare("SHORT", None)
        .secret("SHORT", "3b!");
    let (stdout, stderr) = run(&f);
    // The boundary: 4 bytes are a secret, 3 are not (the positive control).
    assert_eq!(String::from_utf8_lossy(&stdout), "pin=[REDACTED]\nshort=3b!\n");
    let stderr = String::from_utf8_lossy(&stderr);
    assert!(!stderr.contains("secret PIN is shorter"), "{stderr}");
    assert!(stderr.contains("secret SHORT is shorter than 4 bytes"), "{stderr}");
}

/// A secret with what shells, URLs and markup quote: `'` `"` `$` `\` `&` `<` `>` `/` `@` `:` `+`
/// `=` `!` `~`, a space, and a non-ASCII letter.
const QUOTABLE: &str = "pa'ss wörd\"$x\\y&z<q>/@:+=!~1";

/// What `script` prints (stdout, and stderr where it says `2>&1`) with `$S` a node secret, and
/// the same program's output with no secret configured and `S` set by the program itself: the
/// positive control, which shows what the tools really print.
fn printed_both_ways(secret: &str, script: &str) -> (String, String) {
    let mut f = Fixture::new();
    f.program("web", "apply", script).declare("S", None).secret("S", secret);
    let redacted = String::from_utf8_lossy(&run(&f).0).into_owned();
    let mut plain = Fixture::new();
    plain.program(
        "web",
        "apply",
        &format!("S='{}'; export S\n{script}", secret.replace('\'', r"'\''")),
    );
    let shown = String::from_utf8_lossy(&run(&plain).0).into_owned();
    (redacted, shown)
}

/// Each line of the control differs from its redacted line, and none holds the secret as it is:
/// only the tools' forms of it can have been redacted.
fn assert_forms_shown(secret: &str, redacted: &str, shown: &str) {
    assert_eq!(redacted.lines().count(), shown.lines().count(), "{shown}");
    for (redacted, shown) in redacted.lines().zip(shown.lines()) {
        assert_ne!(redacted, shown);
        assert!(!shown.contains(secret) && shown.len() > redacted.len(), "{shown}");
    }
}

#[test]
fn bash_set_x_declare_p_and_printf_q_are_redacted() {
    let script = r#"bash -c 'set -x; : "$S"' 2>&1
bash -c 'declare -p S'
LC_ALL=C.UTF-8 bash -c 'declare -p S'
bash -c 'printf "%q\n" "$S"'
LC_ALL=C.UTF-8 bash -c 'printf "%q\n" "$S"'"#;
    // Single quotes with '\''; $'…' with octal escapes in the C locale; double quotes and
    // backslashes in a UTF-8 one.
    let (redacted, shown) = printed_both_ways(QUOTABLE, script);
    assert_eq!(
        redacted,
        "+ : '[REDACTED]'\ndeclare -x S=$'[REDACTED]'\ndeclare -x S=\"[REDACTED]\"\n$'[REDACTED]'\n[REDACTED]\n"
    );
    assert_forms_shown(QUOTABLE, &redacted, &shown);
    assert!(
        shown.starts_with("+ : 'pa'\\''ss w")
            && shown.contains("$'pa\\'ss w\\303\\266rd")
            && shown.contains("pa\\'ss\\ wörd\\\"\\$x"),
        "{shown}"
    );
    // A control character: $'…' everywhere but in `set -x`, which quotes a tab as it is.
    const TABBED: &str = "tab\tsecret'quote-1";
    let (redacted, shown) = printed_both_ways(TABBED, script);
    assert_eq!(
        redacted,
        "+ : '[REDACTED]'\ndeclare -x S=$'[REDACTED]'\ndeclare -x S=$'[REDACTED]'\n$'[REDACTED]'\n$'[REDACTED]'\n"
    );
    assert_forms_shown(TABBED, &redacted, &shown);
    assert!(shown.contains("$'tab\\tsecret\\'quote-1'"), "{shown}");
}

#[test]
fn python_shlex_percent_encoding_and_markup_and_node_are_redacted() {
    let script = r#"/usr/bin/python3 -c '
import html, os, shlex, urllib.parse as url, xml.sax.saxutils as xml
s = os.environ["S"]
print("shlex: " + shlex.quote(s))
print("url: https://deploy:" + url.quote(s, safe="") + "@state.example/tf")
print("path: " + url.quote(s))
print("form: " + url.quote_plus(s))
print("html: " + html.escape(s))
print("xml: " + xml.escape(s))
'
/usr/bin/node -e 'console.log("js: " + encodeURIComponent(process.env.S))'"#;
    let (redacted, shown) = printed_both_ways(QUOTABLE, script);
    assert_eq!(
        redacted,
        "shlex: '[REDACTED]'\nurl: https://deploy:[REDACTED]@state.example/tf\npath: [REDACTED]\nform: [REDACTED]\nhtml: [REDACTED]\nxml: [REDACTED]\njs: [REDACTED]\n"
    );
    assert_forms_shown(QUOTABLE, &redacted, &shown);
    assert!(
        shown.contains(r#"shlex: 'pa'"'"'ss"#)
            && shown.contains("url: https://deploy:pa%27ss%20w%C3%B6rd%22%24x")
            && shown.contains("js: pa'ss%20w%C3%B6rd"),
        "{shown}"
    );
}

/// Node.js's `util.inspect`, which `console.log` uses for an object or an array, quotes a string
/// in one of three ways, chosen by what the whole string holds (Node's `strEscape`): single
/// quotes, double quotes when it holds `'` and no `"`, backticks when it holds both and no
/// backtick (nor `${`), and else single quotes with `\'`; a backslash is doubled in each, and
/// controls are `\t`, `\x01`, .... Each way, for a secret of its own and for a secret inside a
/// longer string whose other text picks the quotes; the positive control is what node printed.
#[test]
fn node_util_inspect_and_console_log_of_an_object_are_redacted() {
    let script = r#"/usr/bin/node -e '
const util = require("util");
const s = process.env.S;
console.log({ k: s });
console.log(util.inspect(s));
console.log([s]);
console.log({ k: "say \"x\" " + s });
console.log({ k: "say \"x\" `y` " + s });
'"#;
    // (secret, how node quoted it alone, its spelling with `"` and with `"` and a backtick
    // around it): each branch of the quoting.
    let cases = [
        // Both quotes and a backslash: backticks, the backslash doubled.
        ("pa\\ss'wo\"rd-1", "`", "pa\\\\ss'wo\"rd-1", "pa\\\\ss\\'wo\"rd-1"),
        // `'` alone: double quotes.
        ("it's\\a-secret-2", "\"", "it's\\\\a-secret-2", "it\\'s\\\\a-secret-2"),
        // `"` alone: single quotes, nothing but the backslash escaped.
        ("say \"hi\"\\now-3", "'", "say \"hi\"\\\\now-3", "say \"hi\"\\\\now-3"),
        // Both quotes and a backtick: single quotes, `'` as `\'`.
        ("a'b\"c`d\\e-4", "'", "a\\'b\"c`d\\\\e-4", "a\\'b\"c`d\\\\e-4"),
        // Both quotes and `${`: the same.
        ("a'b\"c${d}-5", "'", "a\\'b\"c${d}-5", "a\\'b\"c${d}-5"),
        // Controls: named, or in upper-case hex.
        (
            "tab\there\u{1}\u{7f}-6",
            "'",
            "tab\\there\\x01\\x7F-6",
            "tab\\there\\x01\\x7F-6",
        ),
    ];
    // Node's choice, for the lines where other text of the string decides it.
    let quote_of = |text: &str| match (text.contains('\''), text.contains('"')) {
        (false, _) => '\'',
        (true, false) => '"',
        (true, true) if !text.contains('`') && !text.contains("${") => '`',
        (true, true) => '\'',
    };
    for (secret, q, spelled, in_single_quotes) in cases {
        let (redacted, shown) = printed_both_ways(secret, script);
        let (q4, q5) = (
            quote_of(&format!("say \"x\" {secret}")),
            quote_of(&format!("say \"x\" `y` {secret}")),
        );
        assert_eq!(
            redacted,
            format!(
                "{{ k: {q}[REDACTED]{q} }}\n{q}[REDACTED]{q}\n[ {q}[REDACTED]{q} ]\n{{ k: {q4}say \"x\" [REDACTED]{q4} }}\n{{ k: {q5}say \"x\" `y` [REDACTED]{q5} }}\n"
            ),
            "{secret:?}: {shown}"
        );
        assert_forms_shown(secret, &redacted, &shown);
        // The control: node printed these spellings, and not the value as it is.
        assert!(
            shown.starts_with(&format!("{{ k: {q}{spelled}{q} }}\n")),
            "{secret:?}: {shown}"
        );
        assert!(
            shown.ends_with(&format!("`y` {in_single_quotes}' }}\n")),
            "{secret:?}: {shown}"
        );
    }
}

#[test]
fn base64_at_every_offset_in_both_alphabets_and_wrapped_is_redacted() {
    let script = r#"printf %s "$S" | base64 -w0; echo
printf a%s "$S" | base64 -w0; echo
printf user:%s "$S" | base64 -w0; echo
printf '%s\n' "$S" | base64 -w0; echo
/usr/bin/python3 -c 'import base64, os; print(base64.urlsafe_b64encode(os.environ["S"].encode()).rstrip(b"=").decode())'"#;
    let (redacted, shown) = printed_both_ways(QUOTABLE, script);
    let lines: Vec<&str> = redacted.lines().collect();
    let plain: Vec<&str> = shown.lines().collect();
    // The secret alone, and after one byte and after five (`user:`): what is left are the
    // characters with a bit of what came before it (1 of `a`, 2 of `user:`).
    assert_eq!(
        lines[..3],
        [
            "[REDACTED]",
            &format!("{}[REDACTED]", &plain[1][..2]),
            &format!("{}[REDACTED]", &plain[2][..7])
        ]
    );
    // Followed by a newline: the last character holds 4 bits of the secret and 2 of the
    // newline, and stays, with the padding.
    assert!(
        lines[3].starts_with("[REDACTED]")
            && lines[3].len() <= "[REDACTED]".len() + 4
            && plain[3].ends_with(&lines[3]["[REDACTED]".len()..]),
        "{}",
        lines[3]
    );
    assert_eq!(lines[4], "[REDACTED]", "URL-safe alphabet without padding");
    assert_forms_shown(QUOTABLE, &redacted, &shown);
    assert!(
        plain[4].contains('-') && plain[0].contains('+'),
        "both alphabets were exercised: {shown}"
    );
    // Wrapped into lines of 76 (coreutils, Python's encodebytes) and of 64 (openssl).
    let long = format!("{QUOTABLE}-{}-", "0123456789abcdef".repeat(6));
    let script = r#"printf %s "$S" | base64
printf %s "$S" | /usr/bin/openssl base64
/usr/bin/python3 -c 'import base64, os, sys; sys.stdout.write(base64.encodebytes(os.environ["S"].encode()).decode())'"#;
    let (redacted, shown) = printed_both_ways(&long, script);
    assert_eq!(redacted, "[REDACTED]\n[REDACTED]\n[REDACTED]\n");
    assert_eq!(
        long.len(),
        127,
        "a third group of 3 bytes is cut short: the encoding ends in padding"
    );
    assert_eq!(
        shown.lines().map(str::len).collect::<Vec<_>>(),
        [76, 76, 20, 64, 64, 44, 76, 76, 20],
        "{shown}"
    );
}

/// An HTTP server on 127.0.0.1 that answers every request with an empty 200, until the test
/// process ends.
fn loopback_server() -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    port
}

#[test]
fn curl_v_with_basic_auth_is_redacted() {
    let port = loopback_server();
    // With -u, and with the password percent-encoded into the URL: the same header.
    let script = format!(
        r#"curl -sv -u "deploy:$S" -o /dev/null http://127.0.0.1:{port}/ 2>&1 | grep -i '^> authorization'
url=$(/usr/bin/python3 -c 'import os, urllib.parse as u; print(u.quote(os.environ["S"], safe=""))')
curl -sv -o /dev/null "http://deploy:$url@127.0.0.1:{port}/" 2>&1 | grep -i -e '^> authorization' -e "$url""#
    );
    let (redacted, shown) = printed_both_ways(QUOTABLE, &script);
    let plain: Vec<&str> = shown.lines().collect();
    assert_eq!(plain.len(), 2, "{shown}");
    assert_eq!(plain[0], plain[1], "{shown}");
    // `deploy:` is 7 bytes: its base64 is the header's first 10 characters, the last of which
    // holds 4 bits of the password. The rest is the password's, and goes.
    let header = "> Authorization: Basic ";
    assert!(plain[0].starts_with(header), "{shown}");
    let visible = &plain[0][..header.len() + 10];
    assert_eq!(redacted, format!("{visible}[REDACTED]\r\n{visible}[REDACTED]\r\n"));
    assert_forms_shown(QUOTABLE, &redacted, &shown);
}

/// A payload's `TF_HTTP_PASSWORD` of 4096 `a`s (the longest a payload may bring), and a program
/// that prints what agrees with it from every byte on: 4 MiB of `a`s in one line, then the
/// password cut one byte short on 256 lines. Redacting it once took seconds per MiB (each place
/// compared again as far as the text went on agreeing); now each byte is read a bounded number
/// of times, and the bound here only tells a hang (minutes) from a run. The figures are in
/// BENCHMARKS.md (benchmark 7).
#[test]
fn a_long_repeating_password_costs_no_more_than_its_output() {
    let password = "a".repeat(4096);
    let mut f = Fixture::new();
    f.program(
        "web",
        "apply",
        r#"head -c 4194304 /dev/zero | tr '\0' a; echo
line=$(printf %s "$TF_HTTP_PASSWORD" | head -c 4095)
i=0; while [ $i -lt 256 ]; do printf '%s\n' "$line"; i=$((i + 1)); done"#,
    );
    let started = std::time::Instant::now();
    let done = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .payload(&json!({
            "ATTRIBUTE": "web",
            "TF_HTTP_ADDRESS": "https://state.example/tf/ns",
            "TF_HTTP_PASSWORD": password,
        }))
        .expect_success()
        .run();
    let took = started.elapsed();
    // The run of `a`s holds the password everywhere; a line one `a` short holds it nowhere.
    let near = format!("{}\n", &password[..4095]);
    assert!(
        done.raw_stdout.starts_with(b"[REDACTED]\n"),
        "{:?}",
        &done.stdout[..100]
    );
    assert_eq!(done.raw_stdout.len(), 11 + 256 * near.len());
    assert!(
        done.raw_stdout[11..]
            .chunks(near.len())
            .all(|line| line == near.as_bytes())
    );
    assert!(took < Duration::from_secs(60), "redaction took {took:?}");
}
