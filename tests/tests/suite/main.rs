//! The test kit's own integration tests: one test binary, one module per subject. The manual
//! (its examples run, its links and references checked against the code), the shape of the
//! code (no import cycle between the files of jobenv or of the bootstrap), the Nix files
//! (parsed, the NixOS module evaluated without nixpkgs, the package's source set) and the
//! Windmill fake, held to what a real Windmill CE answers.

mod architecture;
mod docs;
mod nix_module;
mod nix_package;
mod nix_parse;
mod windmill_fake;
