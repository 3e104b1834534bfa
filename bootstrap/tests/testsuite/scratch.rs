use fediversity_testkit::bootstrap_bin;
#[test]
fn scratch() {
    let node = crate::support::node();
    let run = node.run(bootstrap_bin!(), &[]);
    eprintln!("{run:?}");
    let run = node.run(bootstrap_bin!(), &[]);
    eprintln!("{run:?}");
    let run = node.run(bootstrap_bin!(), &["--check"]);
    eprintln!("{run:?}");
    panic!();
}
