//! `keys`: the declared keys with their descriptions and defaults.

use crate::cli::KeysArgs;
use crate::error::Error;
use crate::input::keys::read_keys;
use crate::show;

use super::Exit;
use super::output::print;

pub(crate) fn keys(args: KeysArgs) -> Result<Exit, Error> {
    let declared = read_keys(&args.keys).map_err(Error::from)?;
    Ok(print(show::keys(&declared, args.format).as_bytes()))
}
