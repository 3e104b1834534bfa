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
in
{
  devShells.${system}.demo = shell "demo-shell";
}
