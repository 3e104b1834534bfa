# A stand-in deployment repository for the module's tests: it publishes what the NixOS module
# reads from one (its `deploymentRepository` option), in every shape the module accepts, and dev
# shells built without nixpkgs (so that real nix-shell instantiates them offline), whose PATH
# holds programs that print the keys they got.
#
# `attributes` chooses how it publishes its deployment attributes: "names" (the default) as
# seed 001 does, `lib.deploymentAttributeNames`; "former" only under `lib.deploymentAttributes`,
# a name the module does not read; "none" not at all. Its dev shells hold one that is no
# deployment (`default`, a developer's shell), so that the list and the shells differ.
{
  attributes ? "names",
  ...
}:
let
  system = builtins.currentSystem;
  shell =
    name:
    builtins.derivation {
      inherit name system;
      builder = "/bin/sh";
      args = [
        "-c"
        "echo > $out"
      ];
      PATH = "${toString ./bin}:/usr/bin:/bin";
    };
  shells = {
    mastodon = shell "mastodon-shell";
    peertube = shell "peertube-shell";
    default = shell "developer-shell";
  };
  deployments = [
    "mastodon"
    "peertube"
  ];
  attributeLists =
    {
      names.deploymentAttributeNames = deployments;
      former.deploymentAttributes = deployments;
      none = { };
    }
    .${attributes};
in
{
  lib = attributeLists // {
    # What a front-end sends for every deployment (seed 002 FR-014): descriptions as strings
    # and as attrsets, defaults that are JSON values.
    deployEnvKeys = {
      SSH_PRIVATE_KEY_FILE = "Path of the SSH key the deployment connects to its machines with";
      INTERNAL_HOSTS = {
        description = "Hosts of the deployment, a JSON array";
        default = [ ];
      };
      PUBLISHED_HOSTS = {
        description = "Host names the deployment serves, a JSON array";
      };
      ENVIRONMENTS = {
        description = "The deployment's environments, a JSON object";
        default = {
          production = true;
        };
      };
      DOMAIN = {
        description = "The domain the deployment serves";
        default = "example.org";
      };
    };
    # What each method adds; a list of names gets a generated description.
    deployEnvKeysByMethod = {
      tofu = {
        TF_VAR_flavour = "The size of the machines OpenTofu creates";
      };
      ssh = [ "SSH_HOST" ];
    };
    standaloneEnvKeys = [ "STANDALONE_NAME" ];
    # Keys only the node provides: one with a default, one the node must set, and a control
    # key (jobenv consumes it; the module leaves it out of the keys file).
    nodeEnvKeys = {
      NODE_REGION = {
        description = "Where the node runs";
        default = "eu";
      };
      NODE_SITE = "The site of the node";
      DEPLOYMENT_ROOT = "The tree of the deployment programs";
    };
  };

  # Under both systems' names, each built for the machine this runs on.
  devShells.x86_64-linux = shells;
  devShells.aarch64-linux = shells;
}
