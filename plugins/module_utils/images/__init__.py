"""Engine images: definitions, content tags, what an image really holds, and seat checks against it."""
