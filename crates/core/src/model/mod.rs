//! The snapshot as people name it: which accounts, folders and messages a command's
//! `--account`, `--folder` and `--message` pick ([`selection`]), and the names they see
//! for folders. `ls`, the Maildir restore and the IMAP restore all select through here.

pub mod selection;

pub use selection::{
    folder_matches, folder_name, folder_name_selected, folder_selected, message_selected,
    select_accounts, FolderMatch,
};
