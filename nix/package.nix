# Both binaries of the workspace, fediversity-jobenv and fediversity-windmill-bootstrap, built
# from the committed Cargo.lock.
{
  lib,
  rustPlatform,
  cmake,
  pkg-config,
  openssl,
}:
let
  root = ../.;
  lock = builtins.readFile ../Cargo.lock;
  # Native build needs follow from what the lock file holds: aws-lc (rustls' other crypto
  # provider) builds with cmake, openssl-sys links the system OpenSSL. The workspace as written
  # uses ring and neither, so these stay empty unless a dependency change brings them in.
  locks = name: lib.hasInfix ''name = "${name}"'' lock;
  manifest = builtins.fromTOML (builtins.readFile ../jobenv/Cargo.toml);
in
rustPlatform.buildRustPackage {
  pname = "fediversity-windmill";
  inherit (manifest.package) version;

  src = lib.fileset.toSource {
    inherit root;
    # Only what cargo reads: the workspace manifest, the lock file and every member crate of
    # `[workspace] members` (cargo loads all of them even to build one package; a missing one
    # fails the build). tests/tests/suite/nix_package.rs checks this list against Cargo.toml.
    fileset = lib.fileset.unions [
      ../Cargo.toml
      ../Cargo.lock
      ../jobenv
      ../bootstrap
      ../safe-io
      ../tests
      ../bench
    ];
  };

  cargoLock.lockFile = ../Cargo.lock;

  # The two programs of the node, nothing else: the testkit and bench crates (and bench's
  # binaries) are workspace members only so that cargo can load the workspace; they must not
  # end up on the worker's PATH.
  cargoBuildFlags = [
    "-p"
    "fediversity-jobenv"
    "-p"
    "fediversity-windmill-bootstrap"
  ];

  nativeBuildInputs = lib.optional (locks "aws-lc-sys") cmake ++ lib.optional (locks "openssl-sys") pkg-config;
  buildInputs = lib.optional (locks "openssl-sys") openssl;

  # The test suite needs nix-shell, PostgreSQL and an OpenBao server at run time; it runs in CI
  # (`.ci/run`), and the NixOS VM test (`checks.<system>.vm`) runs these binaries for real.
  doCheck = false;

  meta = {
    description = "The Windmill deploy runtime of fediversity: jobenv and the Windmill bootstrap";
    license = lib.licenses.eupl12;
    mainProgram = "fediversity-jobenv";
    platforms = lib.platforms.linux;
  };
}
