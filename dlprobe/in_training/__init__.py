"""Code that runs inside the user's training process and its DataLoader workers; imports torch lazily."""
