//! `profiles list` for people: one row per built-in profile, with the settings that tell them
//! apart.

use crate::output;
use crate::profile::Profile;

pub fn profile_list(profiles: &[Profile]) -> String {
    let mut t = output::new_table();
    t.set_header(vec![
        "Profile",
        "Connections",
        "nofile",
        "somaxconn",
        "deflate window",
        "Description",
    ]);
    for p in profiles {
        t.add_row(vec![
            p.name.clone(),
            p.connections.to_string(),
            p.linux.nofile.to_string(),
            p.linux.somaxconn.to_string(),
            p.server.deflate.window_bits.to_string(),
            p.description.clone(),
        ]);
    }
    format!("{t}\nShow one in full: wstune profiles show NAME\n")
}
