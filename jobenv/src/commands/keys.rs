//! `keys`: the declared keys with their descriptions and defaults.

use jobenv::cli::KeysArgs;
use jobenv::error::Error;
use jobenv::input::keys::read_keys;
use jobenv::show;

use super::Exit;
use super::output::print;

pub fn keys(args: KeysArgs) -> Result<Exit, Error> {
    let declared = read_keys(&args.keys).map_err(Error::Rejected)?;
    Ok(print(show::keys(&declared, args.format).as_bytes()))
}
