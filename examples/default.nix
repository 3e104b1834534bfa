# A tiny stand-in for the deployment repository: one dev shell per attribute, built without
# nixpkgs (so it works offline), whose PATH holds the example programs in ./bin.
{ ... }:
let
  system = builtins.currentSystem;
  shell = name: builtins.derivation {
    inherit name system;
    builder = "/bin/sh";
    args = [ "-c" "echo > $out" ];
    PATH = "${toString ./bin}:/usr/bin:/bin";
  };
  shells = {
    demo = shell "demo-shell";
    site = shell "site-shell";
  };
in
{
  # Under both systems' names, each built for the machine this runs on: a payload that names
  # its SYSTEM (the front-end's example does) finds its shell on either kind of machine.
  devShells.x86_64-linux = shells;
  devShells.aarch64-linux = shells;
}
