//! Images in prompts (`:help agent-images`): what one is, how one is made ready to send (its
//! kind checked, scaled down to what every provider takes), and the row the chat shows of it.
//!
//! Each provider has its own limits (Anthropic scales anything over 1568 px on its long edge
//! and refuses over 5 MB; OpenAI scales to 2048 px; a local model's are unknown), so one limit
//! under all of them is kept here: an image over it is decoded and scaled by the `image` crate
//! in this process, never by a command.

use std::io::Cursor;
use std::sync::Arc;

use image::{DynamicImage, ImageFormat, ImageReader};

/// The longest edge sent: Anthropic's own limit before it scales, under OpenAI's.
pub const MAX_EDGE: u32 = 1568;

/// The most bytes one image is sent as: 5 MB once in base64, Anthropic's limit.
pub const MAX_BYTES: usize = 3_750_000;

/// The most bytes read of an image file or a clipboard: anything larger is refused unread.
pub const MAX_INPUT: usize = 50 * 1024 * 1024;

/// The largest width or height decoded (a file claiming more is refused, not decoded).
const MAX_DECODED_EDGE: u32 = 20_000;

/// The most pixels decoded: a small file can claim a huge image (a PNG of zeros), so what its
/// header says is checked before anything is decoded. 50 million: a 8K screenshot is 33.
const MAX_PIXELS: u64 = 50_000_000;

/// The most memory one decode may take (the image crate's own limit, lowered).
const MAX_ALLOC: u64 = 256 * 1024 * 1024;

/// One image of a prompt, encoded as it is sent.
#[derive(Clone, PartialEq, Eq)]
pub struct Image {
    /// What the person knows it by: the file's name, or `clipboard`.
    pub name: String,
    /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
    pub media_type: String,
    /// Its size in pixels, as sent.
    pub width: u32,
    pub height: u32,
    /// Its size before it was scaled down, when it was.
    pub scaled_from: Option<(u32, u32)>,
    /// The encoded bytes; empty when a saved image could not be found again (then a line
    /// saying so is sent in its place).
    pub data: Arc<[u8]>,
    /// The name it is saved under in the session's image folder, once saved.
    pub file: Option<String>,
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Image")
            .field("name", &self.name)
            .field("media_type", &self.media_type)
            .field("size", &(self.width, self.height))
            .field("bytes", &self.data.len())
            .field("file", &self.file)
            .finish()
    }
}

/// Why bytes could not become an [`Image`]; the text says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    #[error("{0} is not an image agent.nvim sends (png, jpeg, gif or webp)")]
    NotAnImage(String),
    #[error("{name} is {size} bytes; images over {} MB are not read", MAX_INPUT / 1024 / 1024)]
    TooLarge { name: String, size: usize },
    #[error("{name} could not be decoded: {why}")]
    Broken { name: String, why: String },
    #[error("{name} is {width}×{height} pixels; images over 50 million pixels are not read")]
    TooManyPixels {
        name: String,
        width: u32,
        height: u32,
    },
}

impl Image {
    /// `bytes` made ready to send under `name`: a png, jpeg or webp within [`MAX_EDGE`] and
    /// [`MAX_BYTES`] is kept as it is once it decodes whole (a broken one would be refused by
    /// the provider, with every later request); a larger one, or any gif (an animated one is
    /// refused by some providers), is decoded, scaled down where needed and sent as png (or
    /// jpeg when a png would still be too large); anything else is refused.
    pub fn prepare(name: &str, bytes: Vec<u8>) -> Result<Image, ImageError> {
        if bytes.len() > MAX_INPUT {
            return Err(ImageError::TooLarge {
                name: name.to_string(),
                size: bytes.len(),
            });
        }
        let format = match image::guess_format(&bytes) {
            Ok(
                f @ (ImageFormat::Png | ImageFormat::Jpeg | ImageFormat::Gif | ImageFormat::WebP),
            ) => f,
            _ => return Err(ImageError::NotAnImage(name.to_string())),
        };
        let broken = |why: String| ImageError::Broken {
            name: name.to_string(),
            why,
        };
        let reader = || {
            let mut reader = ImageReader::with_format(Cursor::new(&bytes[..]), format);
            let mut limits = image::Limits::default();
            limits.max_image_width = Some(MAX_DECODED_EDGE);
            limits.max_image_height = Some(MAX_DECODED_EDGE);
            limits.max_alloc = Some(MAX_ALLOC);
            reader.limits(limits);
            reader
        };
        let (width, height) = reader()
            .into_dimensions()
            .map_err(|err| broken(err.to_string()))?;
        if u64::from(width) * u64::from(height) > MAX_PIXELS {
            return Err(ImageError::TooManyPixels {
                name: name.to_string(),
                width,
                height,
            });
        }
        let decoded = reader().decode().map_err(|err| broken(err.to_string()))?;
        if width.max(height) <= MAX_EDGE && bytes.len() <= MAX_BYTES && format != ImageFormat::Gif {
            return Ok(Image {
                name: name.to_string(),
                media_type: format.to_mime_type().to_string(),
                width,
                height,
                scaled_from: None,
                data: bytes.into(),
                file: None,
            });
        }
        drop(bytes);
        let (data, media_type, w, h) = scaled(decoded).map_err(broken)?;
        Ok(Image {
            name: name.to_string(),
            media_type: media_type.to_string(),
            width: w,
            height: h,
            scaled_from: (w, h).ne(&(width, height)).then_some((width, height)),
            data: data.into(),
            file: None,
        })
    }

    /// A saved image's description, its bytes read again from its file (or lost: `data`
    /// empty).
    pub fn saved(
        name: String,
        media_type: String,
        (width, height): (u32, u32),
        file: String,
        data: Option<Vec<u8>>,
    ) -> Image {
        Image {
            name,
            media_type,
            width,
            height,
            scaled_from: None,
            data: data.unwrap_or_default().into(),
            file: Some(file),
        }
    }

    /// The chat's row for it: `image: shot.png · 1280×720 · 240 KB`.
    pub fn row(&self) -> String {
        let mut row = format!(
            "image: {} · {}×{} · {}",
            self.name,
            self.width,
            self.height,
            size(self.data.len())
        );
        if let Some((w, h)) = self.scaled_from {
            row.push_str(&format!(" · scaled from {w}×{h}"));
        }
        row
    }

    /// Its bytes in base64, as every wire format sends them.
    pub fn base64(&self) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(&self.data)
    }

    /// A `data:` URL of it (the OpenAI formats).
    pub fn data_url(&self) -> String {
        format!("data:{};base64,{}", self.media_type, self.base64())
    }

    /// How long its base64 is (what it adds to a request).
    pub fn base64_len(&self) -> usize {
        self.data.len().div_ceil(3) * 4
    }

    /// The line sent in place of it in a request that does not carry it: the model in use takes
    /// no images (`images` false; not named, so a switch between two such models keeps the
    /// rendered messages), or it is older than what one request carries ([`REQUEST_IMAGES`],
    /// [`REQUEST_IMAGE_COUNT`]).
    pub fn unsent_line(&self, images: bool) -> String {
        if images {
            format!(
                "[image {} was attached here; left out of this request, which carries the newest images only ({} MB, {} at most)]",
                self.name,
                REQUEST_IMAGES / (1024 * 1024),
                REQUEST_IMAGE_COUNT
            )
        } else {
            format!(
                "[image {} was attached here; the model in use now does not take images, so it is not sent]",
                self.name
            )
        }
    }

    /// Whether its bytes are here to send (a saved one whose file is gone has none).
    pub fn present(&self) -> bool {
        !self.data.is_empty()
    }

    /// The line sent in place of an image whose bytes are gone.
    pub fn lost_line(&self) -> String {
        format!(
            "[image {} was attached here; its saved copy is gone, so it is not sent again]",
            self.name
        )
    }

    /// The file extension of its media type (`png`).
    pub fn extension(&self) -> &'static str {
        match self.media_type.as_str() {
            "image/jpeg" => "jpg",
            "image/gif" => "gif",
            "image/webp" => "webp",
            _ => "png",
        }
    }
}

/// `image` scaled to fit [`MAX_EDGE`], encoded as png, or as jpeg when the png is over
/// [`MAX_BYTES`]; with its media type and size.
fn scaled(image: DynamicImage) -> Result<(Vec<u8>, &'static str, u32, u32), String> {
    // `thumbnail` averages whole pixels into each one kept: no float copy of the image, which
    // a filtered resize of a large one would take hundreds of megabytes for.
    let image = if image.width().max(image.height()) > MAX_EDGE {
        image.thumbnail(MAX_EDGE, MAX_EDGE)
    } else {
        image
    };
    let (w, h) = (image.width(), image.height());
    let mut png = Vec::new();
    image
        .write_to(&mut Cursor::new(&mut png), ImageFormat::Png)
        .map_err(|err| err.to_string())?;
    if png.len() <= MAX_BYTES {
        return Ok((png, "image/png", w, h));
    }
    drop(png);
    for quality in [85, 60, 40] {
        let mut jpeg = Vec::new();
        let encoder = image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, quality);
        image
            .to_rgb8()
            .write_with_encoder(encoder)
            .map_err(|err| err.to_string())?;
        if jpeg.len() <= MAX_BYTES {
            return Ok((jpeg, "image/jpeg", w, h));
        }
    }
    Err(format!(
        "still over {} MB after scaling to {w}×{h}",
        MAX_BYTES / 1_000_000
    ))
}

/// `bytes` as a person reads a size: `812 B`, `240 KB`, `3.4 MB`.
pub fn size(bytes: usize) -> String {
    if bytes < 1024 {
        format!("{bytes} B")
    } else if bytes < 1024 * 1024 {
        format!("{} KB", (bytes + 512) / 1024)
    } else {
        format!("{:.1} MB", bytes as f64 / (1024.0 * 1024.0))
    }
}

/// The most base64 of images one request carries (Anthropic refuses a request over 32 MB, and
/// every image of a conversation is sent again with each request): past it, the oldest are
/// sent as a line naming them, and a prompt whose own images are more is refused.
pub const REQUEST_IMAGES: usize = 24 * 1024 * 1024;

/// The most images one request carries (Anthropic refuses a request of more than 100): the
/// older are sent as lines, as for [`REQUEST_IMAGES`].
pub const REQUEST_IMAGE_COUNT: usize = 100;

/// Why a prompt whose images alone are more than [`REQUEST_IMAGES`] was not sent.
pub fn too_many_for_one_request(base64: usize) -> String {
    format!(
        "agent: the images of this prompt come to {:.1} MB to send, more than the {} MB one request carries; nothing was sent: attach fewer or smaller images",
        base64 as f64 / (1024.0 * 1024.0),
        REQUEST_IMAGES / (1024 * 1024)
    )
}

/// Why a prompt of more than [`REQUEST_IMAGE_COUNT`] images was not sent.
pub fn too_many_images(count: usize) -> String {
    format!(
        "agent: this prompt attaches {count} images, more than the {REQUEST_IMAGE_COUNT} one request carries; nothing was sent: attach fewer"
    )
}

/// What a text-only model is told when a prompt holds images: refused before sending.
pub fn refused_for(model: &str) -> String {
    format!(
        "agent: {model} does not take images, so nothing was sent; pick a model that does with :Agent model, or send the prompt without the image"
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn png(w: u32, h: u32) -> Vec<u8> {
        let image = image::RgbImage::from_fn(w, h, |x, y| {
            image::Rgb([(x % 256) as u8, (y % 256) as u8, 90])
        });
        let mut out = Vec::new();
        DynamicImage::ImageRgb8(image)
            .write_to(&mut Cursor::new(&mut out), ImageFormat::Png)
            .unwrap();
        out
    }

    #[test]
    fn a_small_png_is_sent_as_it_is() {
        let bytes = png(32, 20);
        let image = Image::prepare("shot.png", bytes.clone()).unwrap();
        assert_eq!(&image.data[..], &bytes[..]);
        assert_eq!((image.width, image.height), (32, 20));
        assert_eq!(image.media_type, "image/png");
        assert!(
            image.row().starts_with("image: shot.png · 32×20 · "),
            "{}",
            image.row()
        );
    }

    #[test]
    fn a_huge_image_is_scaled_under_every_limit() {
        let image = Image::prepare("big.png", png(6000, 4000)).unwrap();
        assert_eq!((image.width, image.height), (MAX_EDGE, 1045));
        assert!(image.data.len() <= MAX_BYTES, "{}", image.data.len());
        assert_eq!(image.scaled_from, Some((6000, 4000)));
        let decoded = image::load_from_memory(&image.data).unwrap();
        assert_eq!((decoded.width(), decoded.height()), (MAX_EDGE, 1045));
        assert!(
            image.row().ends_with("· scaled from 6000×4000"),
            "{}",
            image.row()
        );
    }

    #[test]
    fn what_is_not_an_image_is_refused_with_its_name() {
        let err = Image::prepare("notes.png", b"just text".to_vec()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "notes.png is not an image agent.nvim sends (png, jpeg, gif or webp)"
        );
        // Too wide to send as it is, so it is decoded, and its data ends early.
        let mut cut = png(2000, 10);
        cut.truncate(cut.len() / 2);
        assert!(matches!(
            Image::prepare("cut.png", cut),
            Err(ImageError::Broken { name, .. }) if name == "cut.png"
        ));
    }

    /// A PNG of only a signature and a header saying `w`×`h` (no pixels): what a file that
    /// claims a huge image looks like before it is decoded.
    fn png_header(w: u32, h: u32) -> Vec<u8> {
        fn crc32(bytes: &[u8]) -> u32 {
            let mut crc = 0xffff_ffffu32;
            for &b in bytes {
                crc ^= u32::from(b);
                for _ in 0..8 {
                    crc = if crc & 1 == 1 {
                        (crc >> 1) ^ 0xedb8_8320
                    } else {
                        crc >> 1
                    };
                }
            }
            !crc
        }
        let mut header = b"IHDR".to_vec();
        header.extend(w.to_be_bytes());
        header.extend(h.to_be_bytes());
        header.extend([8, 6, 0, 0, 0]);
        let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
        for chunk in [header, b"IDAT".to_vec(), b"IEND".to_vec()] {
            out.extend(((chunk.len() - 4) as u32).to_be_bytes());
            out.extend(&chunk);
            out.extend(crc32(&chunk).to_be_bytes());
        }
        out
    }

    #[test]
    fn a_file_claiming_a_huge_image_or_cut_short_is_refused_before_it_costs_memory() {
        let err = Image::prepare("bomb.png", png_header(20_000, 20_000)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "bomb.png is 20000×20000 pixels; images over 50 million pixels are not read"
        );
        assert!(matches!(
            Image::prepare("wide.png", png_header(30_000, 10)),
            Err(ImageError::Broken { .. })
        ));
        // Small enough to send as it is, but its pixels end early: refused, never sent.
        let mut cut = png(32, 20);
        cut.truncate(cut.len() - 20);
        assert!(matches!(
            Image::prepare("cut.png", cut),
            Err(ImageError::Broken { .. })
        ));
    }

    #[test]
    fn a_gif_goes_as_a_png_of_its_first_frame() {
        let mut gif = Vec::new();
        DynamicImage::ImageRgb8(image::RgbImage::new(12, 7))
            .write_to(&mut Cursor::new(&mut gif), ImageFormat::Gif)
            .unwrap();
        let image = Image::prepare("spin.gif", gif).unwrap();
        assert_eq!(image.media_type, "image/png");
        assert_eq!(
            (image.width, image.height, image.scaled_from),
            (12, 7, None)
        );
        assert_eq!(image::guess_format(&image.data).unwrap(), ImageFormat::Png);
    }

    #[test]
    fn sizes_read_as_a_person_writes_them() {
        assert_eq!(size(812), "812 B");
        assert_eq!(size(240 * 1024), "240 KB");
        assert_eq!(size(3_565_158), "3.4 MB");
    }
}
