//! Audio clips in prompts (`:help agent-acp-audio`): only an external agent whose
//! `promptCapabilities.audio` is set takes them; the built-in agent's providers are sent none.
//!
//! A clip is carried as it is (never decoded or converted here): its kind is read from its
//! first bytes by the `infer` crate, not from its file name, so a renamed file is sent under
//! what it really is, or refused.

use std::sync::Arc;

/// The most bytes one clip is read and sent as: 10 MB, under every agent's request limit once
/// in base64 (Gemini's inline data takes 20 MB per request).
pub const MAX_BYTES: usize = 10 * 1024 * 1024;

/// The file extensions `@` attaches as an audio clip (its bytes then decide).
pub const EXTENSIONS: [&str; 9] = [
    "wav", "mp3", "ogg", "oga", "opus", "flac", "m4a", "aac", "aiff",
];

/// One audio clip of a prompt, as it is sent.
#[derive(Clone, PartialEq, Eq)]
pub struct Audio {
    /// What the person knows it by: the file's name.
    pub name: String,
    /// `audio/wav`, `audio/mpeg`, `audio/ogg`, `audio/flac`, `audio/mp4`, `audio/aac` or
    /// `audio/aiff`.
    pub media_type: String,
    /// Its bytes, as read.
    pub data: Arc<[u8]>,
}

impl std::fmt::Debug for Audio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Audio")
            .field("name", &self.name)
            .field("media_type", &self.media_type)
            .field("bytes", &self.data.len())
            .finish()
    }
}

/// Why bytes could not become an [`Audio`]; the text says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AudioError {
    #[error("{0} is not an audio clip agent.nvim sends (wav, mp3, ogg, flac, m4a, aac or aiff)")]
    NotAudio(String),
    #[error("{name} is {size} bytes; audio clips over {} MB are not sent", MAX_BYTES / 1024 / 1024)]
    TooLarge { name: String, size: usize },
}

impl Audio {
    /// `bytes` made ready to send under `name`: one of the kinds above by its first bytes, at
    /// most [`MAX_BYTES`]; anything else refused.
    pub fn prepare(name: &str, bytes: Vec<u8>) -> Result<Audio, AudioError> {
        if bytes.len() > MAX_BYTES {
            return Err(AudioError::TooLarge {
                name: name.to_string(),
                size: bytes.len(),
            });
        }
        let media_type = infer::get(&bytes)
            .filter(|kind| kind.matcher_type() == infer::MatcherType::Audio)
            .and_then(|kind| media_type(kind.extension()))
            .ok_or_else(|| AudioError::NotAudio(name.to_string()))?;
        Ok(Audio {
            name: name.to_string(),
            media_type: media_type.to_string(),
            data: bytes.into(),
        })
    }

    /// The chat's row for it: `audio: note.wav · 240 KB`.
    pub fn row(&self) -> String {
        format!(
            "audio: {} · {}",
            self.name,
            crate::image::size(self.data.len())
        )
    }

    /// Its bytes in base64, as the wire sends them.
    pub fn base64(&self) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(&self.data)
    }
}

/// Whether `path` names a file `@` attaches as audio, by its extension.
pub fn is_audio_name(path: &str) -> bool {
    path.rsplit_once('.').is_some_and(|(_, ext)| {
        EXTENSIONS
            .iter()
            .any(|known| ext.eq_ignore_ascii_case(known))
    })
}

/// The media type sent for what `infer` found (its extension), in the names agents take
/// (`audio/wav`, not `audio/x-wav`); `None` for a kind not sent (midi, amr, ...).
fn media_type(extension: &str) -> Option<&'static str> {
    Some(match extension {
        "wav" => "audio/wav",
        "mp3" => "audio/mpeg",
        "ogg" | "opus" => "audio/ogg",
        "flac" => "audio/flac",
        "m4a" => "audio/mp4",
        "aac" => "audio/aac",
        "aiff" => "audio/aiff",
        _ => return None,
    })
}

/// What the built-in agent says of a prompt holding audio: refused before sending.
pub fn refused_by_builtin() -> String {
    "agent: the built-in agent's models take no audio, so nothing was sent; send the prompt without the clip, or use an external agent that takes audio (:help agent-acp-audio)".to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    use agent_nvim_fixtures::sounds::wav;

    #[test]
    fn a_clip_is_known_by_its_bytes_not_its_name() {
        let clip = Audio::prepare("note.mp3", wav(8)).unwrap();
        assert_eq!(clip.media_type, "audio/wav");
        assert_eq!(clip.row(), "audio: note.mp3 · 60 B");
        let mut flac = b"fLaC".to_vec();
        flac.extend_from_slice(&[0; 40]);
        assert_eq!(
            Audio::prepare("x.flac", flac).unwrap().media_type,
            "audio/flac"
        );
        let mut ogg = b"OggS".to_vec();
        ogg.extend_from_slice(&[0; 40]);
        assert_eq!(
            Audio::prepare("x.ogg", ogg).unwrap().media_type,
            "audio/ogg"
        );
        assert_eq!(
            Audio::prepare("x.mp3", b"ID3\x04\x00rest".to_vec())
                .unwrap()
                .media_type,
            "audio/mpeg"
        );
    }

    #[test]
    fn text_a_picture_or_a_midi_file_named_as_audio_is_refused() {
        for bytes in [
            b"just some text, not audio".to_vec(),
            b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec(),
            b"MThd\0\0\0\x06\0\x01\0\x01\0\x60".to_vec(),
            Vec::new(),
        ] {
            assert_eq!(
                Audio::prepare("clip.wav", bytes),
                Err(AudioError::NotAudio("clip.wav".into()))
            );
        }
    }

    #[test]
    fn a_clip_over_the_limit_is_refused_with_its_size() {
        let mut big = wav(8);
        big.resize(MAX_BYTES + 1, 0);
        let err = Audio::prepare("long.wav", big).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "long.wav is {} bytes; audio clips over 10 MB are not sent",
                MAX_BYTES + 1
            )
        );
    }

    #[test]
    fn audio_names_are_known_by_extension_in_any_case() {
        assert!(is_audio_name("notes/Clip.WAV"));
        assert!(is_audio_name("a.b/voice.opus"));
        assert!(!is_audio_name("wav"));
        assert!(!is_audio_name("song.mid"));
        assert!(!is_audio_name("shot.png"));
    }
}
