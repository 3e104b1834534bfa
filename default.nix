# For users without flakes: `nix-build -A package`, `nix-build -A vmTest`, and
# `imports = [ (import <this repository> { }).nixosModule ];` (or `<this repository>/nixos-module`).
{
  pkgs ? import <nixpkgs> { },
}:
{
  package = pkgs.callPackage ./nix/package.nix { };
  scripts = pkgs.callPackage ./nix/scripts.nix { };
  nixosModule = ./nixos-module;
  lib = import ./nixos-module/lib.nix;
  vmTest = pkgs.testers.runNixOSTest ./nixos-module/test.nix;
}
