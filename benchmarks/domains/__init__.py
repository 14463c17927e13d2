"""Record domains (`classify`): the text classifiers, subjects-stack, the hybrid's domains
source."""
