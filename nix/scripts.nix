# The Windmill scripts tree the bootstrap uploads: relative paths are Windmill paths
# (f/fediversity/deploy.py -> f/fediversity/deploy). Only the Python files of scripts/.
{ lib, runCommand }:
let
  src = lib.fileset.toSource {
    root = ../scripts;
    fileset = lib.fileset.fileFilter (file: file.hasExt "py") ../scripts;
  };
in
runCommand "fediversity-windmill-scripts" { } ''
  cp -r --no-preserve=mode ${src} $out
''
