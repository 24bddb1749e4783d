//! The snapshot as people name it: which accounts, folders and messages a command's
//! `--account`, `--folder` and `--message` pick ([`selection`]), and the names they see
//! for folders. `ls`, the Maildir restore and the IMAP restore all select through here, and read
//! their messages' blobs by pack span through [`reader`].

pub mod assemble;
pub mod reader;
pub mod selection;

pub use selection::{
    folder_list, folder_matches, folder_name, folder_name_selected, folder_selected,
    message_selected, names_content, no_folder_matches, select_accounts, FolderMatch,
    PickedAccount, PickedFolder, MIN_ID_PREFIX,
};
