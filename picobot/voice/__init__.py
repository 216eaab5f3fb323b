"""Voice: speech to text for voice messages, text to speech for answers to them (docs/VOICE.md)."""
