{
  description = "Fediversity's Windmill deploy runtime: jobenv, the Windmill bootstrap, the deploy scripts and a NixOS module";

  # A nixpkgs with services.windmill, lib.fileset and Rust >= 1.85 (edition 2024).
  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

  outputs =
    { self, nixpkgs }:
    let
      systems = [
        "x86_64-linux"
        "aarch64-linux"
      ];
      forAllSystems = f: nixpkgs.lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});
    in
    {
      packages = forAllSystems (pkgs: {
        default = pkgs.callPackage ./nix/package.nix { };
        scripts = pkgs.callPackage ./nix/scripts.nix { };
      });

      # The module builds its default packages with the node's own pkgs (the same derivations
      # as packages.<system>.{default,scripts} when the nixpkgs is the same).
      nixosModules.default = ./nixos-module;

      # Builtins-only helpers of the module (renderers, defaults), as the offline tests use them.
      lib = import ./nixos-module/lib.nix;

      checks = forAllSystems (pkgs: {
        inherit (self.packages.${pkgs.stdenv.hostPlatform.system}) default scripts;
        vm = pkgs.testers.runNixOSTest ./nixos-module/test.nix;
      });
    };
}
