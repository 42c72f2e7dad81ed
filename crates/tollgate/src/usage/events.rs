//! Reads the `data` lines of a server-sent event stream (`text/event-stream`) as JSON
//! documents, one per event, without holding a line: an event's data goes straight to the
//! member scanner, and a blank line ends the event.

use super::members::Members;

const DATA: &[u8] = b"data:";

#[derive(Debug)]
enum Line {
    /// At the start of a line, with this many bytes of it matching `data:`.
    Start(usize),
    /// In a data line's value; `true` until its first byte, whose space is dropped.
    Data(bool),
    /// In a line of another field, or a comment.
    Other,
}

/// The event stream reader.
#[derive(Debug)]
pub(crate) struct Events {
    members: Members,
    line: Line,
    /// The last byte was a carriage return, so a line feed right after it ends nothing.
    after_cr: bool,
}

impl Events {
    pub(crate) fn new(members: Members) -> Self {
        Self {
            members,
            line: Line::Start(0),
            after_cr: false,
        }
    }

    /// Reads `bytes`, calling `found` with each wanted member of each event's JSON.
    pub(crate) fn feed(&mut self, bytes: &[u8], found: &mut impl FnMut(usize, &[u8])) {
        for &byte in bytes {
            let after_cr = std::mem::replace(&mut self.after_cr, byte == b'\r');
            if byte == b'\n' && after_cr {
                continue;
            }
            if matches!(byte, b'\n' | b'\r') {
                self.line = match self.line {
                    // A blank line ends the event, and its document with it.
                    Line::Start(0) => {
                        self.members.reset();
                        Line::Start(0)
                    }
                    // An event's data lines join with line feeds, which JSON reads as space.
                    Line::Data(_) => {
                        self.members.feed(b"\n", found);
                        Line::Start(0)
                    }
                    Line::Start(_) | Line::Other => Line::Start(0),
                };
                continue;
            }
            self.line = match self.line {
                Line::Start(matched) if DATA.get(matched) == Some(&byte) => {
                    if matched + 1 == DATA.len() {
                        Line::Data(true)
                    } else {
                        Line::Start(matched + 1)
                    }
                }
                Line::Start(_) | Line::Other => Line::Other,
                Line::Data(first) => {
                    if !(first && byte == b' ') {
                        self.members.feed(&[byte], found);
                    }
                    Line::Data(false)
                }
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(stream: &[u8], piece: usize) -> Vec<String> {
        let mut events = Events::new(Members::new(vec!["usage".to_owned()]));
        let mut found = Vec::new();
        for chunk in stream.chunks(piece) {
            events.feed(chunk, &mut |_, value: &[u8]| {
                found.push(String::from_utf8_lossy(value).trim().to_owned());
            });
        }
        found
    }

    #[test]
    fn each_event_is_a_document_in_whatever_pieces_it_comes() {
        let stream = b": comment\r\nevent: chunk\r\ndata: {\"usage\":null,\"x\":\"data: {\\\"usage\\\":3}\"}\r\n\r\n\
data: {\"usage\":\ndata: {\"completion_tokens\":12}}\n\n\
data:{\"usage\":{\"completion_tokens\":13}}\r\rdata: [DONE]\n\n";
        for piece in 1..=stream.len() {
            assert_eq!(
                read(stream, piece),
                vec![
                    "null",
                    "{\"completion_tokens\":12}",
                    "{\"completion_tokens\":13}"
                ],
                "pieces of {piece}"
            );
        }
    }

    #[test]
    fn a_broken_event_does_not_spill_into_the_next() {
        let stream = b"data: {\"usage\":{\"a\":\"unterminated\n\ndata: {\"usage\":4}\n\n";
        assert_eq!(read(stream, 7), vec!["4"]);
    }
}
